package policy

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Eviction loops (docs/operations.md, "Eviction loops"): a workload whose pods
// this node evicts again and again, because each replacement lands on the node
// as soon as the pressure condition clears and grows the same way. The
// kubelet's EvictionLoopBackoff (kubernetes#65240) was designed and never
// built; LoopTracker is its pure part: it groups the node's evictions by
// owning workload, counts them in a window, and answers with the backoff the
// agent applies (the node's pressure condition, and so evictiond's taint, held
// on an exponential schedule while the same workload keeps returning).

// Workload kinds a pod's eviction is grouped by.
const (
	WorkloadDeployment  = "Deployment"
	WorkloadReplicaSet  = "ReplicaSet"
	WorkloadStatefulSet = "StatefulSet"
	WorkloadJob         = "Job"
	WorkloadPod         = "Pod"
	// WorkloadOther is the metric label of any other owner kind (a custom
	// controller's): the label's values stay a fixed, small set.
	WorkloadOther = "other"
)

// Workload is what a pod's eviction is grouped by: its owning workload.
type Workload struct {
	Kind       string    `json:"kind"`
	APIVersion string    `json:"apiVersion,omitempty"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid,omitempty"`
}

func (w Workload) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// MetricKind is the workload's kind as a metric label: one of the kinds above.
func (w Workload) MetricKind() string {
	switch w.Kind {
	case WorkloadDeployment, WorkloadReplicaSet, WorkloadStatefulSet, WorkloadJob, WorkloadPod:
		return w.Kind
	}
	return WorkloadOther
}

// WorkloadOf is the workload that owns pod. A ReplicaSet rolls up to its
// Deployment by name without a read: the Deployment controller names its
// ReplicaSets <deployment>-<pod-template-hash> and labels their pods with that
// hash. UID is the owner reference's where the owner is the workload itself
// (StatefulSet, Job, a bare ReplicaSet); a Deployment's is not on the pod, and
// a bare pod's is its own.
func WorkloadOf(pod *v1.Pod) Workload {
	w := Workload{Kind: WorkloadPod, APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		w = Workload{Kind: ref.Kind, APIVersion: ref.APIVersion, Namespace: pod.Namespace, Name: ref.Name, UID: ref.UID}
		if ref.Kind == WorkloadReplicaSet {
			if hash := pod.Labels["pod-template-hash"]; hash != "" && strings.HasSuffix(ref.Name, "-"+hash) {
				w = Workload{Kind: WorkloadDeployment, APIVersion: "apps/v1", Namespace: pod.Namespace, Name: strings.TrimSuffix(ref.Name, "-"+hash)}
			}
		}
		break
	}
	return w
}

// key identifies a workload in the tracker (not its UID: a Deployment's is
// not known from its pods, and a bare pod's changes with each re-creation).
func (w Workload) key() string { return w.Kind + "/" + w.Namespace + "/" + w.Name }

// LoopEviction is one eviction of a workload's pod, as the tracker keeps it.
type LoopEviction struct {
	At  time.Time `json:"at"`
	Pod string    `json:"pod"`
	// Memory is the pod's working set at eviction (bytes); 0 when not a memory eviction.
	Memory int64 `json:"memory,omitempty"`
	// GrowthRate is Memory over the pod's age at eviction (bytes per second).
	GrowthRate float64 `json:"growthRate,omitempty"`
	Signal     Signal  `json:"signal"`
}

// LoopRecord is one workload's recent evictions and its backoff. It is the
// unit the agent keeps in its journal across restarts.
type LoopRecord struct {
	Workload Workload `json:"workload"`
	// Evictions are the newest ones, at most maxLoopEvictionsKept.
	Evictions []LoopEviction `json:"evictions"`
	// Level is 0 outside a loop; the k-th eviction in a loop sets it to k.
	Level int `json:"level"`
	// Total counts the evictions since the record started (Evictions keeps
	// only the newest).
	Total int `json:"total"`
	// BackoffUntil is when the backoff of the last eviction ends.
	BackoffUntil time.Time `json:"backoffUntil,omitempty"`
}

// maxLoopEvictionsKept bounds a record: the window's count needs at most
// LoopsConfig.Count evictions, the Event a few more for its history.
const maxLoopEvictionsKept = 16

// LoopsConfig is the compiled evictionLoops section.
type LoopsConfig struct {
	Enabled bool
	// Count evictions of one workload within Window make a loop.
	Count  int
	Window time.Duration
	// InitialBackoff is the backoff of a loop's first eviction; each further
	// one doubles it, up to MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// LoopVerdict is the tracker's answer to one eviction.
type LoopVerdict struct {
	Workload Workload
	// InLoop: Count evictions within Window, or a loop not yet reset.
	InLoop bool
	// Started: this eviction made the loop (the owner is told once per loop
	// level change; Started is the first).
	Started bool
	// Count is the evictions in the loop (or in the window, outside one).
	Count int
	// Backoff is how long the node's pressure condition is held from this
	// eviction; zero outside a loop.
	Backoff time.Duration
	Until   time.Time
	Last    LoopEviction
	// Rate is the mean growth rate over the evictions kept (bytes per second).
	Rate float64
}

// LoopTracker groups the node's evictions by workload. It is used from the
// loop goroutine only.
type LoopTracker struct {
	cfg     LoopsConfig
	records map[string]*LoopRecord
}

// NewLoopTracker returns a tracker holding records (from the journal),
// expired ones dropped.
func NewLoopTracker(cfg LoopsConfig, records []LoopRecord, now time.Time) *LoopTracker {
	t := &LoopTracker{cfg: cfg, records: map[string]*LoopRecord{}}
	for i := range records {
		r := records[i]
		t.records[r.Workload.key()] = &r
	}
	t.Expire(now)
	return t
}

// SetConfig applies a reloaded configuration; records are kept, unless
// loops are turned off: then every record is dropped.
func (t *LoopTracker) SetConfig(cfg LoopsConfig) {
	t.cfg = cfg
	if !cfg.Enabled {
		clear(t.records)
	}
}

// Record counts an eviction of w's pod and returns the verdict.
func (t *LoopTracker) Record(w Workload, ev LoopEviction) LoopVerdict {
	now := ev.At
	t.Expire(now)
	r := t.records[w.key()]
	if r == nil {
		r = &LoopRecord{Workload: w}
		t.records[w.key()] = r
	}
	if w.UID != "" {
		r.Workload.UID = w.UID
	}
	r.Evictions = append(r.Evictions, ev)
	if len(r.Evictions) > maxLoopEvictionsKept {
		r.Evictions = r.Evictions[len(r.Evictions)-maxLoopEvictionsKept:]
	}
	r.Total++
	v := LoopVerdict{Workload: r.Workload, Last: ev, Rate: meanRate(r.Evictions)}
	if r.Level == 0 {
		inWindow := 0
		for _, e := range r.Evictions {
			if now.Sub(e.At) < t.cfg.Window {
				inWindow++
			}
		}
		v.Count = inWindow
		if inWindow < t.cfg.Count {
			return v
		}
		v.Started = true
		r.Total = inWindow
	}
	r.Level++
	v.InLoop, v.Count = true, r.Total
	v.Backoff = LoopBackoff(t.cfg, r.Level)
	v.Until = now.Add(v.Backoff)
	r.BackoffUntil = v.Until
	return v
}

// LoopBackoff is the backoff of a loop's level-th eviction:
// InitialBackoff·2^(level-1), at most MaxBackoff.
func LoopBackoff(cfg LoopsConfig, level int) time.Duration {
	d := cfg.InitialBackoff
	for i := 1; i < level && d < cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, cfg.MaxBackoff)
}

// Expire drops what no longer counts: outside a loop, evictions older than
// Window; a loop whose workload stayed away for Window after its backoff
// ended is over (reset: the next eviction starts counting from one).
func (t *LoopTracker) Expire(now time.Time) {
	for k, r := range t.records {
		if r.Level > 0 {
			if now.Sub(r.BackoffUntil) >= t.cfg.Window {
				delete(t.records, k)
			}
			continue
		}
		kept := r.Evictions[:0]
		for _, e := range r.Evictions {
			if now.Sub(e.At) < t.cfg.Window {
				kept = append(kept, e)
			}
		}
		r.Evictions = kept
		if len(kept) == 0 {
			delete(t.records, k)
		}
	}
}

// Looping reports whether w is in a loop, and its record.
func (t *LoopTracker) Looping(w Workload) (LoopRecord, bool) {
	r := t.records[w.key()]
	if r == nil || r.Level == 0 {
		return LoopRecord{}, false
	}
	return *r, true
}

// Len is the number of workloads with a record.
func (t *LoopTracker) Len() int { return len(t.records) }

// Records returns the records, ordered by workload, for the journal.
func (t *LoopTracker) Records() []LoopRecord {
	out := make([]LoopRecord, 0, len(t.records))
	for _, r := range t.records {
		c := *r
		c.Evictions = append([]LoopEviction(nil), r.Evictions...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload.key() < out[j].Workload.key() })
	return out
}

// Holds returns, per node condition, the latest backoff end still ahead of
// now: what the engine holds (Engine.HoldConditionUntil).
func (t *LoopTracker) Holds(now time.Time) map[v1.NodeConditionType]time.Time {
	out := map[v1.NodeConditionType]time.Time{}
	for _, r := range t.records {
		if r.Level == 0 || !r.BackoffUntil.After(now) || len(r.Evictions) == 0 {
			continue
		}
		c := r.Evictions[len(r.Evictions)-1].Signal.Condition()
		if c != "" && r.BackoffUntil.After(out[c]) {
			out[c] = r.BackoffUntil
		}
	}
	return out
}

func meanRate(evs []LoopEviction) float64 {
	var sum float64
	n := 0
	for _, e := range evs {
		if e.GrowthRate > 0 {
			sum += e.GrowthRate
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Describe is the verdict in words, for the Event, the log and simulate.
func (v LoopVerdict) Describe(node string) string {
	mem := "n/a"
	if v.Last.Memory > 0 {
		mem = fmt.Sprintf("%dMi", v.Last.Memory>>20)
	}
	rate := "n/a"
	if v.Rate > 0 {
		rate = fmt.Sprintf("%.1fMi/s", v.Rate/(1<<20))
	}
	return fmt.Sprintf("Eviction loop on node %s: %d evictions of %s (last: pod %s, %s, working set %s at eviction, growth %s); node kept under %s pressure (NoSchedule) for %s, until %s",
		node, v.Count, v.Workload, v.Last.Pod, v.Last.Signal, mem, rate, v.Last.Signal.Resource(), v.Backoff, v.Until.UTC().Format(time.RFC3339))
}
