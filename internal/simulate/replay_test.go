package simulate

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/trace"
)

// recordScenario plays a scenario through the daemon with the trace recorder
// around the scenario's node, as `evictiond run --record-trace` wraps the
// real one, and returns the recording.
func recordScenario(t *testing.T, file string) ([]trace.Record, *policy.Config) {
	t.Helper()
	return recordScenarioOn(t, file, func(n *Node, _ *clocktesting.FakeClock) daemon.Node { return n })
}

// recordScenarioOn is recordScenario with the recorder around wrap(node).
func recordScenarioOn(t *testing.T, file string, wrap func(*Node, *clocktesting.FakeClock) daemon.Node) ([]trace.Record, *policy.Config) {
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
	rec := daemon.NewRecorder(ctx, wrap(node, clk), w, clk.Now)
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
		"../../examples/pdb-refusal.yaml", "../../examples/disk-imagefs.yaml", "../../examples/memory-reclaim.yaml"} {
		t.Run(file, func(t *testing.T) {
			recs, cfg := recordScenario(t, file)
			ev, br := trace.Decisions(recs)
			if len(ev) == 0 {
				t.Fatalf("the scenario evicts nothing: the comparison would prove nothing")
			}
			requireAgreement(t, recs, cfg)
			t.Logf("%d records: evictions %q, brake %q", len(recs), ev, br)
		})
	}
}

// slowAPINode is a scenario's node whose API server is slow to answer the
// first eviction request: while it is in flight the loop looks twice, and
// the second look shows memory.available falling 100 MiB every 10 ms, and
// the brake, fired on it, ends the looks.
type slowAPINode struct {
	*Node
	now   func() time.Time
	looks int
}

func (n *slowAPINode) LookInFlight(done <-chan struct{}, interval time.Duration) ([]policy.Observations, bool) {
	n.looks++
	switch n.looks {
	case 1:
		return nil, true // nothing new yet
	case 2:
		at := n.now()
		obs := func(avail int64, d time.Duration) policy.Observations {
			return policy.Observations{policy.SignalMemoryAvailable: {Available: avail, Capacity: 8 << 30, Time: at.Add(d)}}
		}
		return []policy.Observations{obs(300<<20, 10*time.Millisecond), obs(200<<20, 20*time.Millisecond)}, true
	}
	return n.Node.LookInFlight(done, interval)
}

// A recording in which the brake fired while a request was in flight (a
// slow API server) replays to the same decisions: the replay's own requests
// are answered at once, and it takes the recorded looks instead.
func TestReplayTakesTheLooksOfARequestInFlight(t *testing.T) {
	var slow *slowAPINode
	recs, cfg := recordScenarioOn(t, "../../examples/memory-pressure.yaml", func(n *Node, _ *clocktesting.FakeClock) daemon.Node {
		slow = &slowAPINode{Node: n, now: n.now}
		return slow
	})
	_, br := trace.Decisions(recs)
	if slow.looks != 2 || len(br) == 0 || !strings.HasPrefix(br[0], "freeze ") {
		t.Fatalf("looks %d, brake calls %q: the recording should freeze a pod while its request was in flight", slow.looks, br)
	}
	looks := 0
	for _, r := range recs {
		if r.Kind == trace.KindLook {
			looks++
		}
	}
	if looks != slow.looks {
		t.Errorf("the recording holds %d looks, the loop took %d", looks, slow.looks)
	}
	requireAgreement(t, recs, cfg)
}

// realEpisode is a trace recorded by evictiond on the e2e cluster's node
// (TestBrake, 2026-11-25: a hog at 40 MiB/s evicted on the graceful path, then
// a hog at the fastest ramp that ignores SIGTERM, frozen while evictiond
// watched its graceful eviction and killed on the node).
func realEpisode(t *testing.T) ([]trace.Record, *policy.Config) {
	t.Helper()
	f, err := os.Open("testdata/trace/brake-e2e.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	recs, cfg, err := ReadTrace(data)
	if err != nil {
		t.Fatal(err)
	}
	return recs, cfg
}

func TestReplayOfARealEpisodeAgrees(t *testing.T) {
	recs, cfg := realEpisode(t)
	ev, br := trace.Decisions(recs)
	if len(ev) != 2 || len(br) != 2 {
		t.Fatalf("the recording should hold 2 evictions and a freeze and a kill: %q %q", ev, br)
	}
	requireAgreement(t, recs, cfg)
}

// The replay must fail when the simulated side differs from the node. Two
// differences, each one this project had: a loop driven pass by pass with the
// graceful watch settled inside its pass (simulate before the replay test
// existed: the watch read the fast readings of later passes, and the brake
// never fired), and a node without fast readings (the simulated node before
// this round), and a node whose fast reads return the pass's own reading (a
// scenario's node between its steps).
func TestReplayFailsWhenTheSimulatedSideDiffers(t *testing.T) {
	recs, cfg := realEpisode(t)
	t.Run("watch settled inside its pass", func(t *testing.T) {
		got, err := replay(recs, cfg, false, replayOptions{settleEachPass: true})
		if err != nil {
			t.Fatal(err)
		}
		if Agreement(recs, got.Trace) == "" {
			t.Fatal("the replay agreed although the loop was driven otherwise than Run drives it")
		}
	})
	t.Run("fast reads return the pass's reading", func(t *testing.T) {
		got, err := replay(recs, cfg, false, replayOptions{wrap: func(n daemon.Node) daemon.Node { return &staleFast{Node: n} }})
		if err != nil {
			t.Fatal(err)
		}
		diff := Agreement(recs, got.Trace)
		if diff == "" {
			t.Fatal("the replay agreed although the node's fast reads were stale")
		}
		t.Logf("caught:\n%s", diff)
	})
}

// staleFast answers a fast read with the pass's own reading.
type staleFast struct {
	daemon.Node
	last policy.Observations
}

func (s *staleFast) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	o := s.Node.Observe(ctx, pods)
	s.last = o.Observations
	return o
}

func (s *staleFast) ObserveFast() policy.Observations {
	s.Node.ObserveFast() // the recorded answer is consumed, as the real call would be
	return s.last
}

// requireAgreement replays recs with cfg and requires the recording's decisions and no drift.
func requireAgreement(t *testing.T, recs []trace.Record, cfg *policy.Config) {
	t.Helper()
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
}
