package simulate

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/trace"
)

// recordScenario plays a scenario through the daemon with the trace recorder
// around the scenario's node, as `evictiond run --record-trace` wraps the
// real one, and returns the recording.
func recordScenario(t *testing.T, file string) ([]trace.Record, *policy.Config) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc, cfg, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := ParseSteps(sc)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(Epoch)
	node := NewNode(sc, clk.Now)
	client, err := node.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := trace.NewWriter(&buf)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := daemon.NewRecorder(ctx, node, w, clk.Now)
	rec.Start(node.Name, types.UID(sc.Self), sc.Config, false)
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client, Pods: node, Node: rec, Recorder: &record.FakeRecorder{}, Clock: clk},
		daemon.Options{NodeName: node.Name, SelfUID: types.UID(sc.Self), Logger: slog.New(slog.DiscardHandler), OnPass: rec.OnPass})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, st := range steps {
		clk.SetTime(Epoch.Add(st.At))
		node.Apply(st.Input)
		d.Agent.Pass(ctx, "ticker")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := trace.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return recs, cfg
}

func TestReplayOfARecordedScenarioAgrees(t *testing.T) {
	for _, file := range []string{"../../examples/memory-pressure.yaml", "../../examples/memory-brake.yaml",
		"../../examples/pdb-refusal.yaml", "../../examples/disk-imagefs.yaml"} {
		t.Run(file, func(t *testing.T) {
			recs, cfg := recordScenario(t, file)
			ev, br := trace.Decisions(recs)
			if len(ev) == 0 {
				t.Fatalf("the scenario evicts nothing: the comparison would prove nothing")
			}
			got, err := Replay(recs, cfg, false)
			if err != nil {
				t.Fatal(err)
			}
			if diff := Agreement(recs, got.Trace); diff != "" {
				t.Fatal(diff)
			}
			if len(got.Drift) > 0 {
				t.Fatalf("drift: %q", got.Drift)
			}
			t.Logf("%d records: evictions %q, brake %q", len(recs), ev, br)
		})
	}
}
