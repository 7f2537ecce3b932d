package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/simulate"
)

// runSimulate plays a scenario and prints the decisions as JSON (the public
// format of docs/simulate.md) or as text for people.
func runSimulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "scenario file (YAML or JSON); - for stdin")
	traceFile := fs.String("trace", "", "a trace recorded by `evictiond run --record-trace`, replayed instead of a scenario")
	configFile := fs.String("config", "", "with --trace: replay with this EvictionConfiguration instead of the recorded one")
	output := fs.String("o", "json", "output format: json or text")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*file == "") == (*traceFile == "") {
		fmt.Fprintln(stderr, "simulate: one of -f SCENARIO or --trace FILE is required")
		return 2
	}
	if *configFile != "" && *traceFile == "" {
		fmt.Fprintln(stderr, "simulate: --config: only with --trace (a scenario holds its configuration)")
		return 2
	}
	var res *simulate.Result
	if *traceFile != "" {
		var err error
		if res, err = replayTrace(*traceFile, *configFile, stderr); err != nil {
			fmt.Fprintf(stderr, "simulate: %v\n", err)
			return 1
		}
		return writeResult(res, *output, stdout, stderr)
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
	res, err = simulate.Run(sc, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return writeResult(res, *output, stdout, stderr)
}

// replayTrace replays a recorded trace, with another configuration when
// configFile is set, and says on stderr whether the replay decided as the
// node did.
func replayTrace(traceFile, configFile string, stderr io.Writer) (*simulate.Result, error) {
	data, err := readInput(traceFile)
	if err != nil {
		return nil, err
	}
	recs, cfg, err := simulate.ReadTrace(data)
	if err != nil {
		return nil, err
	}
	if configFile != "" {
		doc, err := readInput(configFile)
		if err != nil {
			return nil, err
		}
		c, ferrs := policy.Load(doc)
		if ferrs != nil {
			return nil, fmt.Errorf("--config %s:\n%w", configFile, ferrs)
		}
		cfg = c
	}
	got, err := simulate.Replay(recs, cfg, configFile != "")
	if err != nil {
		return nil, err
	}
	switch diff := simulate.Agreement(recs, got.Trace); {
	case configFile != "":
		fmt.Fprintf(stderr, "replayed %d recorded passes with %s; the node's own decisions are in the trace\n", len(got.Result.Steps), configFile)
	case diff == "":
		fmt.Fprintf(stderr, "replayed %d recorded passes: the same decisions as the node\n", len(got.Result.Steps))
	default:
		fmt.Fprintf(stderr, "replayed %d recorded passes: the decisions differ from the node's\n%s\n", len(got.Result.Steps), diff)
	}
	for _, d := range got.Drift {
		fmt.Fprintf(stderr, "drift: %s\n", d)
	}
	return got.Result, nil
}

func writeResult(res *simulate.Result, output string, stdout, stderr io.Writer) int {
	if output == "text" {
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
