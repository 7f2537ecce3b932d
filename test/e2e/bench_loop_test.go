//go:build e2e && bench_loop

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// benchLoopConfig is evictiond's configuration for the loop bench: the e2e node's
// thresholds, loops at their defaults (3 evictions in 30 min) but a 1 min initial backoff
// (default 10 min), so that the doubling shows within the bench's 10 minutes.
var benchLoopConfig = loopEvictiondConfig(30*time.Second, "{initialBackoff: 1m}")

// benchLeakArgs: 100 MiB/s up to 2960 MiB, then hold. The hold sits below the 3 GiB
// kubepods limit (no OOM kill) and past the kubelet's 100Mi allocatableMemory.available
// threshold with the bystanders' 50 MiB, so the kubelet alone evicts it too; evictiond's
// 500Mi threshold is crossed about 25 s into the ramp.
var benchLeakArgs = []string{"-rate-mib=100", "-target-mib=2960"}

// loopBenchResult is one setup's run.
type loopBenchResult struct {
	setup      string
	start      time.Time
	duration   time.Duration
	evictions  []leakEviction
	bystanders []leakEviction
	tainted    time.Duration
	intervals  int
	loopEvents int
	oomKills   int64
}

// TestBenchLoop runs a Deployment of one leaking pod for BENCH_LOOP_DURATION (default 10
// min) on the kubelet alone, then with evictiond, each on a fresh cluster, and prints the
// table of docs/benchmarks.md ("Eviction loops"), also written to BENCH_LOOP_OUT.
func TestBenchLoop(t *testing.T) {
	duration := 10 * time.Minute
	if v := os.Getenv("BENCH_LOOP_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BENCH_LOOP_DURATION=%q: %v", v, err)
		}
		duration = d
	}
	var results []loopBenchResult
	for _, setup := range []string{"kubelet alone", "evictiond"} {
		t.Run(strings.ReplaceAll(setup, " ", "-"), func(t *testing.T) {
			results = append(results, runLoopBench(t, setup, duration))
		})
	}
	report := formatLoopBench(results)
	t.Logf("\n%s", report)
	if out := os.Getenv("BENCH_LOOP_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			t.Errorf("writing %s: %v", out, err)
		}
	}
}

func runLoopBench(t *testing.T, setup string, duration time.Duration) loopBenchResult {
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if setup == "evictiond" {
		if _, err := c.DeployEvictiond(ctx, cluster.DeployOptions{Config: benchLoopConfig}); err != nil {
			t.Fatalf("deploying evictiond: %v", err)
		}
	}
	oomBefore := machineOOMKills(t)
	r := startLeak(t, c, "bench-loop", benchLeakArgs)
	lastShown := 0
	for time.Since(r.start) < duration {
		time.Sleep(5 * time.Second)
		if leak, _ := r.evictions(t, c); len(leak) != lastShown {
			lastShown = len(leak)
			t.Logf("%s: +%s: %d evictions of %s", setup, time.Since(r.start).Round(time.Second), len(leak), leakName)
		}
	}
	ivs := r.taintIntervals(t)
	res := loopBenchResult{setup: setup, start: r.start, duration: duration, tainted: tainted(ivs), intervals: len(ivs),
		oomKills: machineOOMKills(t) - oomBefore}
	res.evictions, res.bystanders = r.evictions(t, c)
	res.loopEvents = len(r.loopEvents(t, c))
	for _, iv := range ivs {
		t.Logf("%s: tainted +%s .. +%s (%s)", setup, iv.from.Sub(r.start).Round(time.Second), iv.to.Sub(r.start).Round(time.Second), iv.to.Sub(iv.from).Round(time.Second))
	}
	if err := c.Client.AppsV1().Deployments(r.ns).Delete(ctx, leakName, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting deployment %s: %v", leakName, err)
	}
	return res
}

// formatLoopBench is the markdown table: cumulative evictions of the leaking workload at
// each minute, then totals.
func formatLoopBench(results []loopBenchResult) string {
	var b strings.Builder
	if len(results) == 0 {
		return ""
	}
	minutes := int(results[0].duration / time.Minute)
	b.WriteString("| setup |")
	for m := 1; m <= minutes; m++ {
		fmt.Fprintf(&b, " %d min |", m)
	}
	b.WriteString(" node memory-tainted | EvictionLoop Events | bystanders evicted | OOM kills |\n|---|")
	for m := 1; m <= minutes; m++ {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s |", r.setup)
		for m := 1; m <= minutes; m++ {
			n := 0
			for _, e := range r.evictions {
				if e.at.Sub(r.start) < time.Duration(m)*time.Minute {
					n++
				}
			}
			fmt.Fprintf(&b, " %s |", strconv.Itoa(n))
		}
		fmt.Fprintf(&b, " %s (%.0f %%, %d intervals) | %d | %d | %d |\n", r.tainted.Round(time.Second),
			100*r.tainted.Seconds()/r.duration.Seconds(), r.intervals, r.loopEvents, len(r.bystanders), r.oomKills)
	}
	return b.String()
}
