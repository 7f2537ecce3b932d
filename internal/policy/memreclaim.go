package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Reclaim before evict: when a memory signal comes within memoryReclaim.margin
// of its threshold, the pods holding the most page cache are asked to give it
// back (cgroup v2 memory.reclaim) before any pod is evicted for it. The
// kubelet's working set counts active page cache (kubernetes#43916), so it
// evicts a pod for cache the kernel would have dropped; here the kernel drops
// it first, and a pod goes only if that was not enough.

// Defaults of the memoryReclaim section.
const (
	DefaultMemoryReclaimMargin      = 100 << 20
	DefaultMemoryReclaimMaxPerPass  = 256 << 20
	DefaultMemoryReclaimPodInterval = 30 * time.Second
	// memoryReclaimMinAsk: a pod with less page cache than this is not asked
	// (a write to memory.reclaim costs a scan of the pod's LRU lists).
	memoryReclaimMinAsk = 8 << 20
)

// MemoryReclaimSettings configure reclaim before evict (cgroup v2 only).
type MemoryReclaimSettings struct {
	// Enabled: default false (it changes which pod is evicted, or whether one is).
	Enabled *bool `json:"enabled,omitempty"`
	// Margin: reclaim starts when a memory signal's available is below its
	// threshold + margin, and asks for enough to bring it to threshold +
	// 2×margin. Default 100Mi.
	Margin string `json:"margin,omitempty"`
	// MaxPerPass bounds the bytes asked of the kernel in one pass, over
	// every pod. Default 256Mi.
	MaxPerPass string `json:"maxPerPass,omitempty"`
	// PodInterval: a pod is asked at most once per interval. Default 30s.
	PodInterval string `json:"podInterval,omitempty"`
	// GuaranteedPods lets reclaim take Guaranteed pods' page cache too.
	// Default false.
	GuaranteedPods bool `json:"guaranteedPods"`
}

// MemoryReclaimConfig is the compiled MemoryReclaimSettings.
type MemoryReclaimConfig struct {
	Enabled        bool
	Margin         int64
	MaxPerPass     int64
	PodInterval    time.Duration
	GuaranteedPods bool
}

// memoryReclaim compiles the memoryReclaim section.
func (c *compiler) memoryReclaim(raw MemoryReclaimSettings) MemoryReclaimConfig {
	return MemoryReclaimConfig{
		Enabled:        boolOr(raw.Enabled, false),
		Margin:         c.bytes("memoryReclaim.margin", raw.Margin, DefaultMemoryReclaimMargin, 0),
		MaxPerPass:     c.bytes("memoryReclaim.maxPerPass", raw.MaxPerPass, DefaultMemoryReclaimMaxPerPass, memoryReclaimMinAsk),
		PodInterval:    c.duration("memoryReclaim.podInterval", raw.PodInterval, DefaultMemoryReclaimPodInterval, time.Second, time.Hour),
		GuaranteedPods: raw.GuaranteedPods,
	}
}

// bytes parses a quantity of bytes; empty yields def; below min or above
// 64Ti is an error naming the field.
func (c *compiler) bytes(field, val string, def, min int64) int64 {
	if val == "" {
		return def
	}
	q, err := ParseQuantity(val)
	if err != nil {
		c.fail(field, "", val, QuantityRule(err, "must be a quantity of bytes like 100Mi"))
		return def
	}
	limit := maxThresholdQuantity[ResourceMemory]
	if q.Cmp(limit) > 0 {
		c.fail(field, "", val, "must be at most "+limit.String())
		return def
	}
	if v := q.Value(); v < min {
		c.fail(field, "", val, fmt.Sprintf("must be at least %s", fmtBytes(min)))
		return def
	}
	return q.Value()
}

func normalizeMemoryReclaim(m MemoryReclaimConfig) MemoryReclaimSettings {
	return MemoryReclaimSettings{Enabled: ptr(m.Enabled), Margin: resource.NewQuantity(m.Margin, resource.BinarySI).String(),
		MaxPerPass: resource.NewQuantity(m.MaxPerPass, resource.BinarySI).String(), PodInterval: m.PodInterval.String(),
		GuaranteedPods: m.GuaranteedPods}
}

// MemoryReclaimPlan is what reclaim before evict asks of the kernel in one
// pass: the memory signal nearest its threshold, how much it needs, and which
// pods give it.
type MemoryReclaimPlan struct {
	Signal Signal `json:"signal"`
	// Available is the signal's reading before reclaim; Threshold its highest
	// threshold resolved (soft or hard); Trigger = Threshold + margin.
	Available int64 `json:"available"`
	Threshold int64 `json:"threshold"`
	Trigger   int64 `json:"trigger"`
	// Need = Threshold + 2×margin - Available, at most memoryReclaim.maxPerPass.
	Need int64 `json:"need"`
	// EvictionDue: a hard threshold of a memory signal was met before reclaim
	// (an eviction would have been considered this pass).
	EvictionDue bool `json:"evictionDue"`
	// Targets are the pods asked, in order; Skipped those passed over and why.
	Targets []MemoryReclaimTarget `json:"targets"`
	Skipped []ExcludedPod         `json:"-"`
}

// MemoryReclaimTarget is one pod asked to give back page cache.
type MemoryReclaimTarget struct {
	Pod *v1.Pod `json:"-"`
	// Ask is the bytes written to the pod cgroup's memory.reclaim.
	Ask int64 `json:"ask"`
	// File and WorkingSet are the pod's page cache and working set before.
	File       int64 `json:"file"`
	WorkingSet int64 `json:"workingSet"`
	Request    int64 `json:"request"`
	// Reason says why this pod, in words a user can check.
	Reason string `json:"reason"`
}

// MemoryReclaimDue returns the plan's head (no targets) for the memory signal
// nearest its trigger, or nil when reclaim is off or no memory signal is
// within its margin. It needs no pod usage, so the loop reads the pods'
// cgroups only when it returns a plan.
func MemoryReclaimDue(cfg *Config, obs Observations, layout FilesystemLayout) *MemoryReclaimPlan {
	mc := cfg.MemoryReclaim
	if !mc.Enabled {
		return nil
	}
	var plan *MemoryReclaimPlan
	due := false
	for _, t := range ThresholdsFor(cfg.Thresholds, layout) {
		if !t.Signal.IsMemory() || t.Signal.IsPSI() {
			continue
		}
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		th := t.quantity(o.Capacity)
		if t.Hard() && th > o.Available {
			due = true
		}
		trigger := th + mc.Margin
		if o.Available >= trigger {
			continue
		}
		deficit := th + 2*mc.Margin - o.Available
		if plan == nil || deficit > plan.Need {
			plan = &MemoryReclaimPlan{Signal: t.Signal, Available: o.Available, Threshold: th, Trigger: trigger, Need: deficit}
		}
	}
	if plan != nil {
		plan.Need = min(plan.Need, mc.MaxPerPass)
		plan.EvictionDue = due
	}
	return plan
}

// ChooseMemoryReclaimTargets fills the plan's targets: pods above their
// memory request first (the kubelet would evict among them first), then the
// most page cache; each asked for at most its page cache and the need left.
// Passed over: evictiond's own pod, pods excluded from eviction, Guaranteed
// pods (unless memoryReclaim.guaranteedPods), pods asked within
// memoryReclaim.podInterval (lastAsked), pods whose page cache is unmeasured.
func ChooseMemoryReclaimTargets(plan *MemoryReclaimPlan, cfg *Config, self types.UID, pods []*v1.Pod, stats PodStatsByUID,
	lastAsked map[types.UID]time.Time, now time.Time) {
	mc := cfg.MemoryReclaim
	var cands []MemoryReclaimTarget
	for _, p := range pods {
		skip := func(why string) { plan.Skipped = append(plan.Skipped, ExcludedPod{Pod: p, Reason: why}) }
		st, ok := stats[p.UID]
		switch why := exclusionReason(p, cfg, self, now); {
		case why != "":
			skip(why)
			continue
		case !mc.GuaranteedPods && isGuaranteed(p):
			skip("Guaranteed (memoryReclaim.guaranteedPods is false)")
			continue
		case !ok || st.MemoryFile == nil || st.MemoryWorkingSet == nil:
			skip("page cache not measured")
			continue
		case *st.MemoryFile < memoryReclaimMinAsk:
			continue // nothing worth a scan
		}
		if at, ok := lastAsked[p.UID]; ok && now.Sub(at) < mc.PodInterval {
			skip(fmt.Sprintf("asked %v ago (memoryReclaim.podInterval %v)", now.Sub(at).Round(time.Second), mc.PodInterval))
			continue
		}
		cands = append(cands, MemoryReclaimTarget{Pod: p, File: *st.MemoryFile, WorkingSet: *st.MemoryWorkingSet,
			Request: podRequest(p, v1.ResourceMemory)})
	}
	slices.SortStableFunc(cands, func(a, b MemoryReclaimTarget) int {
		if c := cmpBool(a.WorkingSet > a.Request, b.WorkingSet > b.Request); c != 0 {
			return c
		}
		return cmp.Compare(b.File, a.File)
	})
	left := plan.Need
	for i := range cands {
		if left <= 0 {
			break
		}
		t := cands[i]
		t.Ask = min(t.File, left)
		above := "within its memory request"
		if t.WorkingSet > t.Request {
			above = fmt.Sprintf("working set %s above its request %s", fmtBytes(t.WorkingSet), fmtBytes(t.Request))
		}
		t.Reason = fmt.Sprintf("page cache %s, %s; asked %s of %s needed to bring %s to %s", fmtBytes(t.File), above,
			fmtBytes(t.Ask), fmtBytes(plan.Need), plan.Signal, fmtBytes(plan.Threshold+2*mc.Margin))
		plan.Targets = append(plan.Targets, t)
		left -= t.Ask
	}
}

// MemoryThresholdMet reports whether a hard threshold of a memory (non-PSI)
// signal is met by obs: after reclaim, whether an eviction is still due.
func MemoryThresholdMet(cfg *Config, obs Observations, layout FilesystemLayout) bool {
	for _, t := range ThresholdsFor(cfg.Thresholds, layout) {
		if !t.Hard() || !t.Signal.IsMemory() || t.Signal.IsPSI() {
			continue
		}
		if o, ok := obs[t.Signal]; ok && t.quantity(o.Capacity) > o.Available {
			return true
		}
	}
	return false
}

// isGuaranteed is the pod's QoS class as the API server set it, or, when
// unset (a scenario's pod), the rule: every container's CPU and memory limit
// set and requests equal to them.
func isGuaranteed(p *v1.Pod) bool {
	if p.Status.QOSClass != "" {
		return p.Status.QOSClass == v1.PodQOSGuaranteed
	}
	if len(p.Spec.Containers) == 0 {
		return false
	}
	for _, c := range p.Spec.Containers {
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			l, ok := c.Resources.Limits[r]
			if !ok {
				return false
			}
			if q, ok := c.Resources.Requests[r]; ok && q.Cmp(l) != 0 {
				return false
			}
		}
	}
	return true
}
