package main

// observe registers itself beside validate and simulate; the usage text in
// main.go should list it: "evictiond observe [--once] [-o json|table]".
func init() { commands["observe"] = runObserve }
