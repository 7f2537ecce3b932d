package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/simulate"
)

const simulateHelp = `Usage: evictiond simulate -f SCENARIO [-o json|text]
       evictiond simulate --trace FILE [--config FILE] [-o json|text]

Runs the agent's decision loop over a scenario (a configuration, a node,
pods and a timeline of observations) on a virtual clock and prints every
decision: JSON as docs/simulate.md describes it, or text for people.
With --trace, replays an episode recorded on a node by
'evictiond run --record-trace' instead, and says on stderr whether the
replay decided as the node did (--config: what another configuration
would have done).
Exit 1: the scenario or trace is invalid (every problem on stderr, one a line).
`

// runSimulate plays a scenario, or replays a recorded trace, and prints the
// decisions as JSON (the public format of docs/simulate.md) or as text for
// people.
func runSimulate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("simulate", simulateHelp, stdout, stderr)
	file := fs.StringP("file", "f", "", "scenario file (YAML or JSON); - for stdin")
	traceFile := fs.String("trace", "", "a trace recorded by `evictiond run --record-trace`, replayed instead of a scenario")
	configFile := fs.String("config", "", "with --trace: replay with this EvictionConfiguration instead of the recorded one")
	output := fs.StringP("output", "o", "json", "output format: json or text")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if (*file == "") == (*traceFile == "") {
		return usageError(fs, stderr, errors.New("one of -f/--file SCENARIO or --trace FILE is required"))
	}
	if *configFile != "" && *traceFile == "" {
		return usageError(fs, stderr, errors.New("--config: only with --trace (a scenario holds its configuration)"))
	}
	if *output != "json" && *output != "text" {
		return usageError(fs, stderr, fmt.Errorf("--output: value %q: must be json or text", *output))
	}
	var res *simulate.Result
	if *traceFile != "" {
		var err error
		if res, err = replayTrace(*traceFile, *configFile, stderr); err != nil {
			fmt.Fprintf(stderr, "evictiond simulate: %v\n", err)
			return exitFailure
		}
		return writeResult(res, *output, stdout, stderr)
	}
	data, err := readInput(*file)
	if err != nil {
		fmt.Fprintf(stderr, "evictiond simulate: %v\n", err)
		return exitFailure
	}
	sc, cfg, err := simulate.Decode(data)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	res, err = simulate.Run(sc, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
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
		return exitOK
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
