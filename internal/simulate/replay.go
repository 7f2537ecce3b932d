package simulate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/trace"
)

// A replay plays a recorded trace (`evictiond run --record-trace`) through
// the simulated node on a virtual clock. Each recorded pass is a step at the
// time it started. The node answers the loop with what the real node
// answered, call for call and in the same order: the readings, the pods'
// usage, the fast readings, the pod cgroups and what reclaim freed. What is
// not replayed is decided again: the loop and its evictor on the virtual
// clock, the brake's holds on the simulated node, the API server's answers
// (the refusals of the recording's PodDisruptionBudgets aside). So when the
// replay asks the node something the real loop did not ask, or in another
// order, the answers drift and the decisions with them: that is the
// agreement the replay test checks.

// ReadTrace reads a recorded trace and the configuration in force at its
// start (the document recorded, --dry-run applied).
func ReadTrace(data []byte) ([]trace.Record, *policy.Config, error) {
	recs, err := trace.Read(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	cfg, ferrs := policy.Load([]byte(recs[0].Config))
	if ferrs != nil {
		return nil, nil, fmt.Errorf("trace: the recorded configuration:\n%w", ferrs)
	}
	cfg.DryRun = cfg.DryRun || recs[0].DryRun
	return recs, cfg, nil
}

// Replayed is a replay's outcome: the steps' decisions in simulate's format,
// the replay's own trace (the same recorder the daemon uses), and what the
// node was asked beyond what the recording holds.
type Replayed struct {
	Result *Result
	Trace  []trace.Record
	// Drift names the calls the replay made that the recording had no answer
	// left for (the last answer was given again).
	Drift []string
}

// Replay plays recs with cfg (the recorded one, or another to ask what it
// would have done). Configurations reloaded during the recording are applied
// at their time unless override is set.
func Replay(recs []trace.Record, cfg *policy.Config, override bool) (*Replayed, error) {
	return replay(recs, cfg, override, replayOptions{})
}

// replayOptions make the simulated side differ on purpose (the tests that
// prove the agreement can fail).
type replayOptions struct {
	// settleEachPass drives the loop pass by pass, each settling its
	// graceful watch before the next, instead of as Run interleaves them.
	settleEachPass bool
	// wrap replaces the node the loop sees.
	wrap func(daemon.Node) daemon.Node
}

func replay(recs []trace.Record, cfg *policy.Config, override bool, o replayOptions) (*Replayed, error) {
	if len(recs) == 0 || recs[0].Kind != trace.KindStart {
		return nil, fmt.Errorf("trace: first record: must be the start record")
	}
	start := recs[0]
	steps, answers, reloads, err := replaySteps(recs)
	if err != nil {
		return nil, err
	}
	epoch := start.At
	clk := clocktesting.NewFakeClock(epoch)
	sim := &Node{Name: start.Node, now: clk.Now, obs: policy.Observations{}, stats: policy.PodStatsByUID{}, held: map[types.UID]brake.Hold{}}
	rn := &replayNode{Node: sim, answers: answers, clock: clk}
	client, err := sim.Clientset()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := trace.NewWriter(&buf)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var node daemon.Node = rn
	if o.wrap != nil {
		node = o.wrap(rn)
	}
	rec := daemon.NewRecorder(ctx, node, w, clk.Now)
	rec.Start(start.Node, start.Self, []byte(start.Config), start.DryRun)
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client, Pods: sim, Node: rec, Recorder: discardEvents{}, Clock: clk},
		daemon.Options{NodeName: sim.Name, SelfUID: start.Self, Logger: slog.New(slog.DiscardHandler), OnPass: rec.OnPass})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	res := &Result{Steps: []StepResult{}}
	cur := cfg
	for _, st := range steps {
		for len(reloads) > 0 && !reloads[0].at.After(st.at) {
			if !override {
				cur = reloads[0].cfg
				d.Reload(cur)
			}
			reloads = reloads[1:]
		}
		// What the loop ran beside the passes until this one, then the pass;
		// the clock then stands where the recorded pass ended (a pass waits
		// on the API server), where the loop's watch timer starts.
		d.Agent.Advance(ctx, st.at)
		sim.Apply(st.input)
		pass := d.Agent.PassOnce
		if o.settleEachPass {
			pass = d.Agent.Pass
		}
		rep := pass(ctx, st.source)
		res.Steps = append(res.Steps, stepResult(st.at.Sub(epoch).Round(time.Millisecond).String(), rep, cur, st.at))
		if clk.Now().Before(st.end) {
			clk.SetTime(st.end)
		}
	}
	// Up to the recording's end and not past it: a recording read while the
	// agent runs ends wherever the loop was (replayNode.tail).
	rn.mu.Lock()
	rn.tail = true
	rn.mu.Unlock()
	d.Agent.Advance(ctx, recs[len(recs)-1].At)
	if err := w.Close(); err != nil {
		return nil, err
	}
	out, err := trace.Read(&buf)
	if err != nil {
		return nil, err
	}
	return &Replayed{Result: res, Trace: out, Drift: rn.drift}, nil
}

// Agreement compares the decisions of a recording and of its replay; "" when
// they agree.
func Agreement(recorded, replayed []trace.Record) string {
	re, rb := trace.Decisions(recorded)
	pe, pb := trace.Decisions(replayed)
	var diff []string
	if !slices.Equal(re, pe) {
		diff = append(diff, fmt.Sprintf("evictions differ\n  recorded: %q\n  replayed: %q", re, pe))
	}
	if !slices.Equal(rb, pb) {
		diff = append(diff, fmt.Sprintf("brake calls differ\n  recorded: %q\n  replayed: %q", rb, pb))
	}
	return strings.Join(diff, "\n")
}

type replayStep struct {
	at, end time.Time // the pass's start (its Observe) and end, as recorded
	source  string
	input   StepInput
}

type reload struct {
	at  time.Time
	cfg *policy.Config
}

// replaySteps cuts the recording into passes: a pass's step holds the pods
// its Observe was passed and the refusals its evictions met; the node's
// answers are kept in call order for the whole replay.
func replaySteps(recs []trace.Record) ([]replayStep, *answers, []reload, error) {
	ans := &answers{}
	var steps []replayStep
	var reloads []reload
	cur := newReplayStep()
	var started bool
	for i, r := range recs[1:] {
		switch r.Kind {
		case trace.KindConfig:
			cfg, ferrs := policy.Load([]byte(r.Config))
			if ferrs != nil {
				return nil, nil, nil, fmt.Errorf("trace record %d: reloaded configuration:\n%w", i+2, ferrs)
			}
			reloads = append(reloads, reload{at: r.At, cfg: cfg})
		case trace.KindObserve:
			if r.Obs == nil {
				return nil, nil, nil, fmt.Errorf("trace record %d: observe: obs: missing", i+2)
			}
			if !started {
				cur.at, started = r.At, true
			}
			for _, uid := range r.Gone {
				cur.input.Gone[uid] = true
			}
			cur.input.Added = append(cur.input.Added, r.Added...)
			ans.observe.add(agent.Observed{Observations: r.Obs.Observations, Pods: r.Obs.Pods, Layout: r.Obs.Layout, Missing: r.Obs.Missing})
		case trace.KindUsage:
			ans.usage.add(r.Usage)
		case trace.KindFast:
			ans.fast.add(r.Fast)
		case trace.KindFastReadings:
			ans.fasts.add(r.Fasts)
		case trace.KindLook:
			ans.looks.add(look{readings: r.Fasts, ok: !r.Answered})
		case trace.KindCgroups:
			ans.cgroups.add(r.UIDs)
		case trace.KindReclaim:
			if r.Reclaim == nil {
				return nil, nil, nil, fmt.Errorf("trace record %d: reclaim: missing", i+2)
			}
			ans.reclaim.add(eviction.ReclaimResult{Freed: r.Reclaim.Freed, Items: r.Reclaim.Items})
		case trace.KindPodReclaim:
			if r.PodReclaim == nil {
				return nil, nil, nil, fmt.Errorf("trace record %d: podReclaim: missing", i+2)
			}
			res := eviction.ReclaimResult{Freed: r.PodReclaim.Freed, Items: r.PodReclaim.Items}
			if r.Err != "" {
				res.Err = recordedError(r.Err)
			}
			ans.podMem.add(res)
		case trace.KindPass:
			if r.Pass == nil {
				continue // the recording's size bound: nothing after it
			}
			if !started {
				cur.at = r.At // a pass that could not list the pods
			}
			cur.source, cur.end = r.Pass.Source, r.At
			for _, uid := range r.Pass.Refused {
				cur.input.Refused[uid] = true
			}
			steps = append(steps, cur)
			cur, started = newReplayStep(), false
		}
	}
	return steps, ans, reloads, nil
}

func newReplayStep() replayStep {
	return replayStep{input: StepInput{Gone: map[types.UID]bool{}, Observations: policy.Observations{}, PodStats: policy.PodStatsByUID{},
		Reclaimable: map[policy.ReclaimStep]int64{}, Refused: map[types.UID]bool{}}}
}

// answers are the real node's answers, in call order.
type answers struct {
	observe queue[agent.Observed]
	usage   queue[policy.PodStatsByUID]
	fast    queue[policy.Observations]
	fasts   queue[[]policy.Observations]
	cgroups queue[[]types.UID]
	reclaim queue[eviction.ReclaimResult]
	podMem  queue[eviction.ReclaimResult]
	looks   queue[look]
}

// look is one LookInFlight answer of a recording.
type look struct {
	readings []policy.Observations
	ok       bool
}

// queue gives a recording's answers to one kind of call in order.
type queue[T any] struct {
	items []T
	i     int
}

func (q *queue[T]) add(v T) { q.items = append(q.items, v) }

// replayNode is the simulated node answering with a recording's readings;
// its brake (holds on the virtual clock), pods and API server are the
// simulated node's.
type replayNode struct {
	*Node
	mu      sync.Mutex
	answers *answers
	drift   []string
	// tail is set for the replay's last stretch, after the last recorded
	// pass up to the recording's end. A recording read while the agent runs
	// ends wherever the loop was, a graceful watch's readings included, and
	// the replay's watch ticks fall at exact sampleIntervals where the loop's
	// timer ticked a little later: one more reading may fit before the end.
	// Those are answered (the last answer again) and not drift.
	tail bool
	// clock is the replay's: Observe moves it to the recorded readings'
	// times (replayNode.Observe).
	clock *clocktesting.FakeClock
}

// next takes q's next answer. Past the last, the replay asks what the real
// loop did not: that is noted, and the last answer is given again (none, if
// again is false).
func next[T any](n *replayNode, q *queue[T], call string, again bool) T {
	n.mu.Lock()
	defer n.mu.Unlock()
	if q.i < len(q.items) {
		q.i++
		return q.items[q.i-1]
	}
	if !n.tail {
		n.drift = append(n.drift, fmt.Sprintf("%s call %d: the recording has %d", call, q.i+1, len(q.items)))
	}
	q.i++
	var zero T
	if !again || len(q.items) == 0 {
		return zero
	}
	return q.items[len(q.items)-1]
}

func (n *replayNode) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	o := next(n, &n.answers.observe, "Observe", true)
	out := agent.Observed{Observations: copyObs(o.Observations), Pods: policy.PodStatsByUID{}, Layout: o.Layout, Missing: o.Missing}
	for uid, ps := range o.Pods {
		out.Pods[uid] = ps
	}
	n.Node.mu.Lock()
	n.Node.obs = copyObs(o.Observations)
	n.Node.mu.Unlock()
	// The recorded pass started when Observe was called and read the node
	// after that; the loop's clock on the node was past every reading when
	// it assessed them. The replay's clock stands at the pass's start: move
	// it to the newest reading, or a pod seen gone in this pass would be
	// gone "before" the readings that still count it (the e2e tier's PDB
	// scenario: the credit for an evicted pod's memory refused, and an
	// eviction the node did not make).
	var newest time.Time
	for _, ob := range o.Observations {
		if ob.Time.After(newest) {
			newest = ob.Time
		}
	}
	if n.clock != nil && newest.After(n.clock.Now()) {
		n.clock.SetTime(newest)
	}
	return out
}

func (n *replayNode) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {
	for uid, ps := range next(n, &n.answers.usage, "ObserveUsage", true) {
		obs.Pods[uid] = ps
	}
}

func (n *replayNode) ObserveFast() policy.Observations {
	return copyObs(next(n, &n.answers.fast, "ObserveFast", true))
}

func (n *replayNode) FastReadings() []policy.Observations {
	return next(n, &n.answers.fasts, "FastReadings", false)
}

// LookInFlight gives the looks the recording took while each request was
// in flight, in order, whatever the replay's own request takes: the one that
// ended them (the answer) ends them here too. A recording without looks
// (made before they were recorded) answers at once.
func (n *replayNode) LookInFlight(done <-chan struct{}, _ time.Duration) ([]policy.Observations, bool) {
	n.mu.Lock()
	q := &n.answers.looks
	var l look
	if q.i < len(q.items) {
		l = q.items[q.i]
		q.i++
	}
	n.mu.Unlock()
	if !l.ok {
		<-done
		return nil, false
	}
	return l.readings, true
}

func (n *replayNode) PodCgroupUIDs() ([]types.UID, error) {
	return next(n, &n.answers.cgroups, "PodCgroupUIDs", true), nil
}

func (n *replayNode) Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	return next(n, &n.answers.reclaim, "Reclaim", false)
}

func (n *replayNode) ReclaimPodMemory(ctx context.Context, pod *v1.Pod, bytes int64) eviction.ReclaimResult {
	return next(n, &n.answers.podMem, "ReclaimPodMemory", false)
}

// recordedError is an error as the trace recorded it; the one the loop tells
// apart (no memory.reclaim on the node) is itself again.
func recordedError(msg string) error {
	if msg == agent.ErrMemoryReclaimUnsupported.Error() {
		return agent.ErrMemoryReclaimUnsupported
	}
	return errors.New(msg)
}
