// Command evictiond keeps a Kubernetes node alive when memory, disk or PIDs
// run short. See `evictiond help`.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/evictiond/evictiond/internal/confine"
	"github.com/evictiond/evictiond/internal/version"
)

const usage = `evictiond — node-pressure eviction, out of the kubelet

Usage:
  evictiond run [flags]               the agent (DaemonSet): watch, decide, reclaim, evict
  evictiond observe [--once] [-o json|table]
                                      what evictiond sees on this node: signals, filesystems, pods
  evictiond validate -f FILE          check a configuration; print it with defaults applied
  evictiond simulate -f SCENARIO      run the decision path over a scenario on a virtual clock
  evictiond probe [--url URL]         ask an agent's health endpoint (the chart's helm test)
  evictiond version [-o json]         this binary's version, commit and Go version (also --version)
  evictiond webhook [flags]           the admission webhook that holds each agent's evictions to its node
  evictiond help                      this text

Run 'evictiond COMMAND --help' for a command's flags. Exit codes: 0 done (or help),
1 failed (an invalid configuration or scenario, an error at run time), 2 wrong command line.
`

// commands maps a subcommand to its entry point; each returns the exit code.
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"validate": runValidate,
	"simulate": runSimulate,
	"version":  runVersion,
}

func main() {
	selfConfine = confine.Apply
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
	case "--version":
		return runVersion(args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "evictiond: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}

const versionHelp = `Usage: evictiond version [-o json|text]

Prints the version, the commit it was built from and the Go version: the
same values as the evictiond_build_info metric and the agent's start-up log.
`

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", versionHelp, stdout, stderr)
	output := fs.StringP("output", "o", "text", "output format: text or json")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	v := version.Get()
	switch *output {
	case "text":
		fmt.Fprintln(stdout, v)
	case "json":
		json.NewEncoder(stdout).Encode(v)
	default:
		return usageError(fs, stderr, fmt.Errorf("--output: value %q: must be text or json", *output))
	}
	return exitOK
}
