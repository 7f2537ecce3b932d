package daemon

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/trace"
)

// Recorder writes to a trace what a node answers the loop and what each pass
// decides (internal/trace): `evictiond run --record-trace` on the real node,
// and the replay of that trace through the simulated node, so the two
// decision logs compare record for record.
type Recorder struct {
	Node
	t   *trace.Writer
	now func() time.Time

	mu    sync.Mutex
	shown map[types.UID]bool // the pods the trace holds
	wake  chan struct{}
	once  sync.Once
	ctx   context.Context
}

// NewRecorder wraps n; its wake-ups are forwarded (and recorded) until ctx ends.
func NewRecorder(ctx context.Context, n Node, t *trace.Writer, now func() time.Time) *Recorder {
	return &Recorder{Node: n, t: t, now: now, shown: map[types.UID]bool{}, ctx: ctx}
}

// Start writes the trace's first record: the node, evictiond's own pod, the
// configuration document and whether --dry-run overrides it.
func (r *Recorder) Start(node string, self types.UID, config []byte, dryRun bool) {
	r.t.Write(trace.Record{Kind: trace.KindStart, At: r.now(), Node: node, Self: self, Config: string(config), DryRun: dryRun})
}

// Config records a reloaded configuration document.
func (r *Recorder) Config(config []byte) {
	r.t.Write(trace.Record{Kind: trace.KindConfig, At: r.now(), Config: string(config)})
}

// OnPass records a pass's decisions (agent.Options.OnPass).
func (r *Recorder) OnPass(source string, rep *agent.Report) {
	p := &trace.Pass{Source: source}
	for _, res := range rep.Evictions {
		e := trace.Eviction{Outcome: string(res.Outcome)}
		if res.Victim != nil {
			e.Pod, e.UID = res.Victim.Pod.Namespace+"/"+res.Victim.Pod.Name, res.Victim.Pod.UID
		}
		p.Evictions = append(p.Evictions, e)
		for _, at := range res.Attempts {
			if at.Outcome == eviction.OutcomePDBBlocked {
				p.Refused = append(p.Refused, at.UID)
			}
		}
	}
	if rep.Assessment != nil && rep.Assessment.Starved != nil {
		p.Starved = rep.Assessment.Starved.Threshold.Signal
	}
	r.t.Write(trace.Record{Kind: trace.KindPass, At: r.now(), Pass: p, Err: rep.Err})
}

// Observe records the pods the loop passed (those new to the trace in full,
// the UIDs of those gone) and the readings.
func (r *Recorder) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	at := r.now()
	obs := r.Node.Observe(ctx, pods)
	rec := trace.Record{Kind: trace.KindObserve, At: at,
		Obs: &trace.Observed{Observations: obs.Observations, Pods: obs.Pods, Layout: obs.Layout, Missing: obs.Missing}}
	r.mu.Lock()
	now := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		now[p.UID] = true
		if !r.shown[p.UID] {
			q := p.DeepCopy()
			q.ManagedFields = nil // half a pod's bytes, and no decision reads them
			rec.Added = append(rec.Added, q)
		}
	}
	for uid := range r.shown {
		if !now[uid] {
			rec.Gone = append(rec.Gone, uid)
		}
	}
	r.shown = now
	r.mu.Unlock()
	r.t.Write(rec)
	return obs
}

// ObserveUsage records the pods' usage after the node added their fresh
// memory and process counts.
func (r *Recorder) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {
	at := r.now()
	r.Node.ObserveUsage(ctx, pods, obs)
	r.t.Write(trace.Record{Kind: trace.KindUsage, At: at, Usage: obs.Pods})
}

// ObserveFast records the fast reading.
func (r *Recorder) ObserveFast() policy.Observations {
	at := r.now()
	o := r.Node.ObserveFast()
	r.t.Write(trace.Record{Kind: trace.KindFast, At: at, Fast: o})
	return o
}

// FastReadings records the fast poll's readings handed to the loop.
func (r *Recorder) FastReadings() []policy.Observations {
	at := r.now()
	o := r.Node.FastReadings()
	r.t.Write(trace.Record{Kind: trace.KindFastReadings, At: at, Fasts: o})
	return o
}

// LookInFlight records each look taken while an eviction request is in
// flight, and the answer that ended them: the replay takes the same looks.
func (r *Recorder) LookInFlight(done <-chan struct{}, interval time.Duration) ([]policy.Observations, bool) {
	o, ok := r.Node.LookInFlight(done, interval)
	r.t.Write(trace.Record{Kind: trace.KindLook, At: r.now(), Fasts: o, Answered: !ok})
	return o, ok
}

// PodCgroupUIDs records the pods found running by their cgroups.
func (r *Recorder) PodCgroupUIDs() ([]types.UID, error) {
	at := r.now()
	uids, err := r.Node.PodCgroupUIDs()
	r.t.Write(trace.Record{Kind: trace.KindCgroups, At: at, UIDs: uids, Err: errString(err)})
	return uids, err
}

// Reclaim records the step and what it freed.
func (r *Recorder) Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	at := r.now()
	res := r.Node.Reclaim(ctx, step, signal, need, live)
	r.t.Write(trace.Record{Kind: trace.KindReclaim, At: at, Err: errString(res.Err),
		Reclaim: &trace.Reclaim{Step: step, Signal: signal, Need: need, Freed: res.Freed, Items: res.Items}})
	return res
}

// ReclaimPodMemory records the pod asked to give memory back and what it freed.
func (r *Recorder) ReclaimPodMemory(ctx context.Context, pod *v1.Pod, bytes int64) eviction.ReclaimResult {
	at := r.now()
	res := r.Node.ReclaimPodMemory(ctx, pod, bytes)
	r.t.Write(trace.Record{Kind: trace.KindPodReclaim, At: at, Err: errString(res.Err),
		PodReclaim: &trace.PodReclaim{UID: pod.UID, Asked: bytes, Freed: res.Freed, Items: res.Items}})
	return res
}

// Freeze records the brake's freeze.
func (r *Recorder) Freeze(pod *v1.Pod, maxFreeze time.Duration) (brake.Hold, error) {
	at := r.now()
	h, err := r.Node.Freeze(pod, maxFreeze)
	r.t.Write(trace.Record{Kind: trace.KindBrake, At: at, Err: errString(err),
		Brake: &trace.BrakeCall{Op: trace.BrakeFreeze, UID: pod.UID, Pod: pod.Namespace + "/" + pod.Name, OK: err == nil}})
	return h, err
}

// Thaw records the end of a hold.
func (r *Recorder) Thaw(uid types.UID) (brake.Hold, bool, error) {
	at := r.now()
	h, ok, err := r.Node.Thaw(uid)
	r.t.Write(trace.Record{Kind: trace.KindBrake, At: at, Err: errString(err),
		Brake: &trace.BrakeCall{Op: trace.BrakeThaw, UID: uid, Pod: h.Pod, OK: ok}})
	return h, ok, err
}

// Kill records the kill of a held pod (it runs beside the loop).
func (r *Recorder) Kill(uid types.UID, timeout time.Duration) (brake.Hold, int, bool, error) {
	at := r.now()
	h, n, ok, err := r.Node.Kill(uid, timeout)
	r.t.Write(trace.Record{Kind: trace.KindBrake, At: at, Err: errString(err),
		Brake: &trace.BrakeCall{Op: trace.BrakeKill, UID: uid, Pod: h.Pod, OK: ok}})
	return h, n, ok, err
}

// Wake forwards the node's wake-ups, recording each.
func (r *Recorder) Wake() <-chan struct{} {
	in := r.Node.Wake()
	if in == nil {
		return nil
	}
	r.once.Do(func() {
		r.wake = make(chan struct{})
		go func() {
			for {
				select {
				case <-r.ctx.Done():
					return
				case <-in:
				}
				r.t.Write(trace.Record{Kind: trace.KindWake, At: r.now()})
				select {
				case r.wake <- struct{}{}:
				case <-r.ctx.Done():
					return
				}
			}
		}()
	})
	return r.wake
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
