//go:build e2e

// Command e2e-clean is `make e2e-clean`: it removes what interrupted e2e runs
// and benches left on this machine (test/e2e/cluster.CleanLeftovers). Run it
// under every tier's lock, as the Makefile does, so nothing is running.
package main

import (
	"fmt"
	"os"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e-clean: needs root (processes, cgroups, mounts)")
		os.Exit(1)
	}
	report := func(format string, args ...any) { fmt.Printf("e2e-clean: "+format+"\n", args...) }
	if err := cluster.CleanLeftovers(report); err != nil {
		fmt.Fprintf(os.Stderr, "e2e-clean: %v\n", err)
		os.Exit(1)
	}
	report("done")
}
