//go:build e2e

package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evictiond/evictiond/internal/simulate"
	"github.com/evictiond/evictiond/internal/trace"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// traceArgs make the agent record its episodes (evictiond run --record-trace)
// into the state directory, where replayAgrees reads them on the host.
var traceArgs = []string{"--record-trace=/var/lib/evictiond/trace.jsonl"}

// replayAfter checks, once the scenario passed, that the agent's trace so far
// (this scenario's episode and those before it) replays to the same decisions.
func replayAfter(t *testing.T, c *cluster.Cluster, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			replayAgrees(t, c, name)
		}
	})
}

// replayAgrees replays the trace the agent recorded on this node through the
// simulated node (evictiond simulate --trace) and requires the same decisions:
// every eviction and its outcome, every freeze, thaw and kill, in order. It
// keeps a copy of the trace under EVICTIOND_E2E_TRACE_DIR when that is set.
func replayAgrees(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	path := filepath.Join(c.StateDir(), "trace.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the agent's trace: %v", err)
	}
	if dir := os.Getenv("EVICTIOND_E2E_TRACE_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name+".jsonl"), data, 0o644); err != nil {
			t.Errorf("keeping the trace: %v", err)
		}
	}
	recs, cfg, err := simulate.ReadTrace(data)
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	evictions, brakeCalls := trace.Decisions(recs)
	if len(evictions) == 0 {
		t.Fatalf("the recording (%d records) holds no eviction: the replay would prove nothing", len(recs))
	}
	got, err := simulate.Replay(recs, cfg, false)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	passes := 0
	for _, r := range recs {
		if r.Kind == trace.KindPass {
			passes++
		}
	}
	t.Logf("trace: %d records, %d passes, %d KiB; decisions: %d evictions, %d brake calls; replay drift: %d calls",
		len(recs), passes, len(data)>>10, len(evictions), len(brakeCalls), len(got.Drift))
	if diff := simulate.Agreement(recs, got.Trace); diff != "" {
		t.Errorf("the replay through the simulated node decides otherwise than the node did:\n%s", diff)
	}
	if len(got.Drift) > 0 {
		t.Errorf("the replay asked the node what the real loop did not:\n  %s", strings.Join(got.Drift, "\n  "))
	}
}
