// Command evictiond is the node-pressure eviction agent. Subcommands:
//
//	evictiond observe [--once] [-o json|table]   what evictiond sees on this node
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: evictiond <observe> [flags]")
		return 2
	}
	switch args[0] {
	case "observe":
		return runObserve(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "evictiond: unknown subcommand %q (known: observe)\n", args[0])
		return 2
	}
}
