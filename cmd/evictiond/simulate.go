package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/evictiond/evictiond/internal/simulate"
)

const simulateHelp = `Usage: evictiond simulate -f SCENARIO [-o json|text]

Runs the agent's decision loop over a scenario (a configuration, a node,
pods and a timeline of observations) on a virtual clock and prints every
decision: JSON as docs/simulate.md describes it, or text for people.
Exit 1: the scenario is invalid (every problem on stderr, one a line).
`

// runSimulate plays a scenario and prints the decisions as JSON (the public
// format of docs/simulate.md) or as text for people.
func runSimulate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("simulate", simulateHelp, stdout, stderr)
	file := fs.StringP("file", "f", "", "scenario file (YAML or JSON); - for stdin")
	output := fs.StringP("output", "o", "json", "output format: json or text")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *file == "" {
		return usageError(fs, stderr, errors.New("-f/--file SCENARIO is required"))
	}
	if *output != "json" && *output != "text" {
		return usageError(fs, stderr, fmt.Errorf("--output: value %q: must be json or text", *output))
	}
	data, err := readInput(*file)
	if err != nil {
		fmt.Fprintf(stderr, "evictiond simulate: %v\n", err)
		return exitFailure
	}
	sc, cfg, err := simulate.Decode(data)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	res, err := simulate.Run(sc, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *output == "text" {
		simulate.WriteText(stdout, res)
		return 0
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		fmt.Fprintf(stderr, "evictiond simulate: %v\n", err)
		return exitFailure
	}
	return exitOK
}
