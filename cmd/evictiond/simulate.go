package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/evictiond/evictiond/internal/simulate"
)

// runSimulate plays a scenario and prints the decisions as JSON (the public
// format of docs/simulate.md) or as text for people.
func runSimulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "scenario file (YAML or JSON); - for stdin")
	output := fs.String("o", "json", "output format: json or text")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" {
		fmt.Fprintln(stderr, "simulate: -f SCENARIO is required")
		return 2
	}
	if *output != "json" && *output != "text" {
		fmt.Fprintf(stderr, "simulate: -o %q: must be json or text\n", *output)
		return 2
	}
	data, err := readInput(*file)
	if err != nil {
		fmt.Fprintf(stderr, "simulate: %v\n", err)
		return 1
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
		fmt.Fprintf(stderr, "simulate: %v\n", err)
		return 1
	}
	return 0
}
