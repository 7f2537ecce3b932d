// Command evictiond keeps a Kubernetes node alive when memory, disk or PIDs
// run short. See `evictiond help`.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `evictiond — node-pressure eviction, out of the kubelet

Usage:
  evictiond run [flags]               the agent (DaemonSet): watch, decide, reclaim, evict
  evictiond observe [--once] [-o json|table]
                                      what evictiond sees on this node: signals, filesystems, pods
  evictiond validate -f FILE          check a configuration; print it with defaults applied
  evictiond simulate -f SCENARIO      run the decision path over a scenario on a virtual clock
  evictiond webhook [flags]           the admission webhook that holds each agent's evictions to its node
  evictiond help                      this text

Run 'evictiond COMMAND -h' for a command's flags.
`

// commands maps a subcommand to its entry point; each returns the exit code.
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"validate": runValidate,
	"simulate": runSimulate,
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "evictiond: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}
