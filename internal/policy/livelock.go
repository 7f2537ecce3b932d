package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Livelock at the limit: a pod at its memory limit can reclaim forever
// without the kernel ever OOM-killing it (its page cache or its file-backed
// working set is always reclaimable, so every charge succeeds after a
// reclaim), and the pod makes next to no progress (actions-runner-controller
// #4436). The kubelet sees a Running, Ready pod. It is found from the per-pod
// reading of self-inflicted pressure (PodMemoryPressure): memory.current at
// 90% of memory.max or more, the pod's own memory.pressure full avg10 (every
// task of the pod stalled at once: no progress) at or above
// livelock.fullStall on every pass for livelock.window, and memory.events
// oom_kill unchanged over that time. It is reported (an Event on the pod, a
// metric, a log line); livelock.restart, off by default, restarts it.

// SignalPodMemoryLivelock labels a livelock restart's eviction (metrics, the
// Evicted Event). It is not a threshold signal: no threshold names it.
const SignalPodMemoryLivelock Signal = "pod.memory.livelock"

// The restart actions.
const (
	// LivelockEvict evicts the pod through the Eviction API, its
	// PodDisruptionBudget respected, as a soft eviction (grace
	// min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)).
	LivelockEvict = "evict"
	// LivelockKill kills every task of the pod cgroup through the brake
	// (cgroup.freeze, then cgroup.kill); the kubelet restarts the pod's
	// sandbox and containers in place. No PodDisruptionBudget is asked.
	LivelockKill = "kill"
)

// Defaults of the livelock section.
const (
	// DefaultLivelockFullStall is systemd-oomd's default
	// (ManagedOOMMemoryPressureLimit=60%), read on the same full line.
	DefaultLivelockFullStall   = 60 * PSIScale / 100
	DefaultLivelockWindow      = time.Minute
	DefaultLivelockMinInterval = 5 * time.Minute
)

// LivelockSettings configure livelock detection (cgroup v2 only).
type LivelockSettings struct {
	// Enabled: default true (it only observes).
	Enabled *bool `json:"enabled,omitempty"`
	// FullStall: the pod's memory.pressure full avg10 at or above this.
	// Default 60%.
	FullStall string `json:"fullStall,omitempty"`
	// Window: how long the pod must stay at its limit, stalled, without an
	// OOM kill. Default 1m (10s–1h).
	Window string `json:"window,omitempty"`
	// Restart: the action, off by default.
	Restart LivelockRestartSettings `json:"restart"`
}

// LivelockRestartSettings configure the restart of a livelocked pod.
type LivelockRestartSettings struct {
	// Enabled: default false (it takes a pod down).
	Enabled *bool `json:"enabled,omitempty"`
	// Action: evict (default) or kill.
	Action string `json:"action,omitempty"`
	// MinInterval: at most one restart on the node per interval. Default 5m
	// (10s–24h).
	MinInterval string `json:"minInterval,omitempty"`
}

// LivelockConfig is the compiled LivelockSettings (FullStall in PSIScale units).
type LivelockConfig struct {
	Enabled     bool
	FullStall   int64
	Window      time.Duration
	Restart     bool
	Action      string
	MinInterval time.Duration
}

func (c *compiler) livelock(raw LivelockSettings) LivelockConfig {
	out := LivelockConfig{
		Enabled:     boolOr(raw.Enabled, true),
		FullStall:   c.percent("livelock.fullStall", raw.FullStall, DefaultLivelockFullStall),
		Window:      c.duration("livelock.window", raw.Window, DefaultLivelockWindow, 10*time.Second, time.Hour),
		Restart:     boolOr(raw.Restart.Enabled, false),
		Action:      LivelockEvict,
		MinInterval: c.duration("livelock.restart.minInterval", raw.Restart.MinInterval, DefaultLivelockMinInterval, 10*time.Second, 24*time.Hour),
	}
	if out.FullStall == 0 && raw.FullStall != "" {
		c.fail("livelock.fullStall", "", raw.FullStall, "must be above 0%: every pod at its limit would be livelocked")
	}
	switch raw.Restart.Action {
	case "", LivelockEvict:
	case LivelockKill:
		out.Action = LivelockKill
	default:
		c.fail("livelock.restart.action", "", raw.Restart.Action, "must be evict (through the Eviction API, PodDisruptionBudgets respected; the default) or kill (the pod cgroup's cgroup.kill; the kubelet restarts it in place)")
	}
	if out.Restart && !out.Enabled {
		c.fail("livelock.restart.enabled", "", "true", "needs livelock.enabled: a livelock that is not detected cannot be restarted")
	}
	return out
}

func normalizeLivelock(l LivelockConfig) LivelockSettings {
	return LivelockSettings{Enabled: ptr(l.Enabled), FullStall: psiText(l.FullStall), Window: l.Window.String(),
		Restart: LivelockRestartSettings{Enabled: ptr(l.Restart), Action: l.Action, MinInterval: l.MinInterval.String()}}
}

// Livelock is a pod found livelocked at its limit.
type Livelock struct {
	Pod      *v1.Pod
	Pressure PodMemoryPressure
	// Since is the first pass that found it at its limit and stalled; For
	// how long it has been so.
	Since time.Time
	For   time.Duration
	// New: first reported this pass (once per episode).
	New bool
	// Reason has the numbers: usage, limit, full avg10/avg60, how long.
	Reason string
}

// LivelockTracker follows each pod's episode at its limit between passes.
// It is the loop's state; Assess and NextRestart are pure in their
// arguments and the tracker.
type LivelockTracker struct {
	episodes    map[types.UID]*livelockEpisode
	lastRestart time.Time
}

type livelockEpisode struct {
	since    time.Time
	oomKills int64
	reported bool
	// restarted: a restart was requested in this episode.
	restarted bool
}

// NewLivelockTracker returns an empty tracker.
func NewLivelockTracker() *LivelockTracker {
	return &LivelockTracker{episodes: map[types.UID]*livelockEpisode{}}
}

// stalledAtLimit: the pass's reading puts the pod at its limit, fully stalled,
// with its OOM kills readable.
func stalledAtLimit(cfg LivelockConfig, p *PodMemoryPressure) bool {
	return p != nil && p.AtLimit() && p.Full[0] >= cfg.FullStall && p.OOMKills >= 0
}

// Assess updates the episodes with this pass's readings and returns the pods
// livelocked now (stalled at their limit for the window, no OOM kill since
// the episode began), longest first. A pod whose reading is missing, below
// its limit or under the stall, or that was OOM-killed, ends its episode: the
// kernel made progress or acted.
func (t *LivelockTracker) Assess(cfg LivelockConfig, now time.Time, pods []*v1.Pod, stats PodStatsByUID) []Livelock {
	if !cfg.Enabled {
		clear(t.episodes)
		return nil
	}
	seen := map[types.UID]bool{}
	var out []Livelock
	for _, p := range pods {
		st, ok := stats[p.UID]
		if !ok || !stalledAtLimit(cfg, st.MemoryPressure) {
			continue
		}
		pp := *st.MemoryPressure
		e := t.episodes[p.UID]
		if e == nil || e.oomKills != pp.OOMKills {
			e = &livelockEpisode{since: now, oomKills: pp.OOMKills}
			t.episodes[p.UID] = e
		}
		seen[p.UID] = true
		d := now.Sub(e.since)
		if d < cfg.Window {
			continue
		}
		out = append(out, Livelock{Pod: p, Pressure: pp, Since: e.since, For: d, New: !e.reported,
			Reason: fmt.Sprintf("at %s of its %s limit, memory.pressure full avg10 %s avg60 %s (livelock.fullStall %s) for %s, no OOM kill (oom_kill %d)",
				fmtBytes(pp.Usage), fmtBytes(pp.Limit), psiText(pp.Full[0]), psiText(pp.Full[1]), psiText(cfg.FullStall),
				d.Round(time.Second), pp.OOMKills)})
		e.reported = true
	}
	for uid := range t.episodes {
		if !seen[uid] {
			delete(t.episodes, uid)
		}
	}
	slices.SortStableFunc(out, func(a, b Livelock) int { return cmp.Compare(b.For, a.For) })
	return out
}

// NextRestart picks the livelocked pod to restart this pass, when
// livelock.restart is on: the longest livelocked pod not restarted yet in its
// episode and not excluded from eviction, at most one per
// livelock.restart.minInterval on the node. It returns nil and why not when
// there is a livelocked pod but none is restarted.
func (t *LivelockTracker) NextRestart(cfg *Config, self types.UID, now time.Time, found []Livelock) (*Livelock, string) {
	if !cfg.Livelock.Restart || len(found) == 0 {
		return nil, ""
	}
	var why []string
	for i := range found {
		l := &found[i]
		if e := t.episodes[l.Pod.UID]; e != nil && e.restarted {
			why = append(why, fmt.Sprintf("%s/%s: restart already requested", l.Pod.Namespace, l.Pod.Name))
			continue
		}
		if r := exclusionReason(l.Pod, cfg, self, now); r != "" {
			why = append(why, fmt.Sprintf("%s/%s: %s", l.Pod.Namespace, l.Pod.Name, r))
			continue
		}
		if next := t.lastRestart.Add(cfg.Livelock.MinInterval); !t.lastRestart.IsZero() && now.Before(next) {
			return nil, fmt.Sprintf("livelock.restart.minInterval %s: the last restart was at %s, the next may be at %s",
				cfg.Livelock.MinInterval, t.lastRestart.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339))
		}
		return l, ""
	}
	return nil, strings.Join(why, "; ")
}

// Restarted records a restart requested for uid at now: the rate limit
// starts; done (the pod was evicted or killed) ends the episode's restarts,
// otherwise (a PodDisruptionBudget refused) it is asked again after
// livelock.restart.minInterval.
func (t *LivelockTracker) Restarted(uid types.UID, now time.Time, done bool) {
	t.lastRestart = now
	if e := t.episodes[uid]; e != nil && done {
		e.restarted = true
	}
}

// LivelockCandidate is the eviction of a livelocked pod: soft (its
// PodDisruptionBudget respected, never escalated to a deletion), with the
// soft grace period.
func LivelockCandidate(cfg *Config, l Livelock) Candidate {
	return Candidate{Pod: l.Pod, Signal: SignalPodMemoryLivelock, GracePeriodSeconds: softGracePeriod(cfg, l.Pod),
		Message:     fmt.Sprintf("The pod was livelocked at its memory limit: %s. ", l.Reason),
		Reason:      "livelocked at its own memory limit (livelock.restart)",
		Annotations: map[string]string{"starved_resource": string(v1.ResourceMemory)}}
}
