package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/evictiond/evictiond/internal/policy"
)

// runValidate: exit 0 and the normalized config on stdout; exit 1 and every
// problem, one per line ("field: value: rule"), on stderr.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "configuration file (EvictionConfiguration YAML); - for stdin")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" {
		fmt.Fprintln(stderr, "validate: -f FILE is required")
		return 2
	}
	data, err := readInput(*file)
	if err != nil {
		fmt.Fprintf(stderr, "validate: %v\n", err)
		return 1
	}
	cfg, errs := policy.Load(data)
	if errs != nil {
		for _, e := range errs {
			fmt.Fprintln(stderr, e.Error())
		}
		return 1
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for _, n := range cfg.Notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	out, err := cfg.MarshalYAML()
	if err != nil {
		fmt.Fprintf(stderr, "validate: rendering: %v\n", err)
		return 1
	}
	stdout.Write(out)
	return 0
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
