package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/evictiond/evictiond/internal/policy"
)

const validateHelp = `Usage: evictiond validate -f FILE

Checks an EvictionConfiguration as the agent would load it. Exit 0: the
configuration with every default applied on stdout, warnings on stderr.
Exit 1: every problem on stderr, one a line ("field: value: rule").
Exit 2: a wrong command line.
`

// runValidate: exit 0 and the normalized config on stdout; exit 1 and every
// problem, one per line ("field: value: rule"), on stderr.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", validateHelp, stdout, stderr)
	file := fs.StringP("config", "f", "", "configuration file (EvictionConfiguration YAML), as run's --config; - for stdin")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *file == "" {
		return usageError(fs, stderr, errors.New("-f/--config FILE is required"))
	}
	data, err := readInput(*file)
	if err != nil {
		fmt.Fprintf(stderr, "evictiond validate: %v\n", err)
		return exitFailure
	}
	cfg, errs := policy.Load(data)
	if errs != nil {
		for _, e := range errs {
			fmt.Fprintln(stderr, e.Error())
		}
		return exitFailure
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for _, n := range cfg.Notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	out, err := cfg.MarshalYAML()
	if err != nil {
		fmt.Fprintf(stderr, "evictiond validate: rendering: %v\n", err)
		return exitFailure
	}
	stdout.Write(out)
	return exitOK
}

func readInput(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}
