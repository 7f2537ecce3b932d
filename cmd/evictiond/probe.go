package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

func init() { commands["probe"] = runProbe }

const probeHelp = `Usage: evictiond probe [--url URL]

Asks an agent's health endpoint and prints its answer: exit 0 when it
answers 200 OK, 1 otherwise. The chart's 'helm test' runs it on a node beside
an agent (host network: the endpoint listens on the node's loopback).
`

func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("probe", probeHelp, stdout, stderr)
	url := fs.String("url", "http://127.0.0.1:9810/readyz", "the endpoint: /readyz (ready to act) or /healthz (alive)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usageError(fs, stderr, fmt.Errorf("--url: value %q: %w", *url, err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "evictiond probe: %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Fprintf(stdout, "%s %s\n%s\n", *url, resp.Status, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return exitFailure
	}
	return exitOK
}
