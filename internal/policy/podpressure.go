package policy

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Self-inflicted memory pressure: PSI is hierarchical, so a pod stalling
// against its own memory limit raises kubepods' and the node's memory.pressure
// as much as it raises its own, and a PSI threshold would report node
// MemoryPressure and evict a bystander for one pod's problem (the reason an
// early-OOM tool was taken out of Deckhouse). A pod whose own stall is high
// while it sits at its own limit, and whose stall accounts for the node's and
// kubepods', is reported instead (an Event on the pod, a metric), and the PSI
// thresholds it alone explains are not met for the pass.

// PodPressureSettings configure the detection (cgroup v2 only). It only
// observes and keeps one pod's stall from being taken for the node's.
type PodPressureSettings struct {
	// Enabled: default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Stall: a pod at its limit whose memory.pressure some avg10 is at or
	// above this is reported. Default 20%. (A pod at its limit explains a met
	// node or kubepods PSI threshold whatever its stall.)
	Stall string `json:"stall,omitempty"`
	// Margin: a node or kubepods PSI reading no more than this above the
	// stalled pods' own is theirs alone. Default 5%.
	Margin string `json:"margin,omitempty"`
}

// PodPressureConfig is the compiled PodPressureSettings (stalls in PSIScale units).
type PodPressureConfig struct {
	Enabled bool
	Stall   int64
	Margin  int64
}

// Defaults of the podPressure section, in PSIScale units.
const (
	DefaultPodPressureStall  = 20 * PSIScale / 100
	DefaultPodPressureMargin = 5 * PSIScale / 100
	// podAtLimitFraction: a pod whose memory.current is at least this part
	// of its memory.max sits at its limit.
	podAtLimitFraction = 0.9
)

func (c *compiler) podPressure(raw PodPressureSettings) PodPressureConfig {
	return PodPressureConfig{
		Enabled: boolOr(raw.Enabled, true),
		Stall:   c.percent("podPressure.stall", raw.Stall, DefaultPodPressureStall),
		Margin:  c.percent("podPressure.margin", raw.Margin, DefaultPodPressureMargin),
	}
}

// percent parses "20%" into PSIScale units; empty yields def.
func (c *compiler) percent(field, val string, def int64) int64 {
	if val == "" {
		return def
	}
	var p float64
	if _, err := fmt.Sscanf(strings.TrimSpace(val), "%g%%", &p); err != nil || !strings.HasSuffix(strings.TrimSpace(val), "%") || p < 0 || p > 100 {
		c.fail(field, "", val, "must be a percentage of time stalled between 0% and 100%, like 20%")
		return def
	}
	return psiHundredths(p)
}

func normalizePodPressure(p PodPressureConfig) PodPressureSettings {
	return PodPressureSettings{Enabled: ptr(p.Enabled), Stall: fmt.Sprintf("%.2f%%", float64(p.Stall)/100),
		Margin: fmt.Sprintf("%.2f%%", float64(p.Margin)/100)}
}

// PodMemoryPressure is a pod cgroup's memory.pressure and where it stands
// against its memory limit.
type PodMemoryPressure struct {
	// Some and Full are the avg10, avg60 and avg300 stalls in PSIScale
	// units; -1 where the file had no such line.
	Some, Full [3]int64
	// Usage is memory.current; Limit memory.max (0: no limit).
	Usage, Limit int64
	// OOMKills is memory.events oom_kill (the pod's and its containers'
	// kills, the file being hierarchical); -1 when it could not be read.
	OOMKills int64
}

// AtLimit reports whether the pod sits at its own memory limit.
func (p PodMemoryPressure) AtLimit() bool {
	return p.Limit > 0 && float64(p.Usage) >= podAtLimitFraction*float64(p.Limit)
}

// SelfInflicted is a pod stalled on memory inside its own limit.
type SelfInflicted struct {
	Pod      *v1.Pod
	Pressure PodMemoryPressure
	// Explains lists the node and kubepods PSI signals whose stall the
	// pods found here account for.
	Reason string
}

// PodPressureAssessment is the pass's verdict on pod stalls.
type PodPressureAssessment struct {
	Pods []SelfInflicted
	// Explained are the PSI signals whose stall is the stalled pods' own:
	// their thresholds are not met this pass.
	Explained map[Signal]string
}

// AssessPodPressure finds the pods stalled against their own limits
// (memory.current at 90% of memory.max or more, some avg10 above zero) while
// no memory byte threshold of the node is met, and the node and kubepods PSI
// signals with a met threshold whose stall is within podPressure.margin of
// theirs: those are explained, the pods' own. It reports the pods whose some
// avg10 is at or above podPressure.stall, and any pod that explains a met
// threshold whatever its stall (a kubepods threshold lower than
// podPressure.stall, or the parent's average catching up first, must not
// count a pod's stall as the node's). Nil when off or nothing to report.
func AssessPodPressure(cfg *Config, obs Observations, layout FilesystemLayout, pods []*v1.Pod, stats PodStatsByUID) *PodPressureAssessment {
	pc := cfg.PodPressure
	if !pc.Enabled || MemoryThresholdMet(cfg, obs, layout) {
		return nil
	}
	var stalled []SelfInflicted
	var maxSome, maxFull [3]int64
	for _, p := range pods {
		st, ok := stats[p.UID]
		if !ok || st.MemoryPressure == nil {
			continue
		}
		pp := *st.MemoryPressure
		if pp.Some[0] <= 0 || !pp.AtLimit() {
			continue
		}
		for i := range 3 {
			maxSome[i], maxFull[i] = max(maxSome[i], pp.Some[i]), max(maxFull[i], pp.Full[i])
		}
		stalled = append(stalled, SelfInflicted{Pod: p, Pressure: pp,
			Reason: fmt.Sprintf("memory.pressure some avg10 %s (podPressure.stall %s) at %s of its %s limit", psiText(pp.Some[0]), psiText(pc.Stall),
				fmtBytes(pp.Usage), fmtBytes(pp.Limit))})
	}
	if len(stalled) == 0 {
		return nil
	}
	out := PodPressureAssessment{Explained: map[Signal]string{}}
	for _, t := range ThresholdsFor(cfg.Thresholds, layout) {
		full, window, ok := psiLineWindow(t.Signal)
		o, seen := obs[t.Signal]
		if !ok || !seen || t.quantity(o.Capacity) <= o.Available {
			continue // not PSI, not read, or not met
		}
		pod := maxSome[window]
		if full {
			pod = maxFull[window]
		}
		if stall := PSIScale - o.Available; stall <= pod+pc.Margin {
			out.Explained[t.Signal] = fmt.Sprintf("%s stall %s is within %s of the stalled pods' own %s", t.Signal, psiText(stall), psiText(pc.Margin), psiText(pod))
		}
	}
	for _, s := range stalled {
		if s.Pressure.Some[0] >= pc.Stall || len(out.Explained) > 0 {
			out.Pods = append(out.Pods, s)
		}
	}
	if len(out.Pods) == 0 {
		return nil
	}
	return &out
}

// psiLineWindow says which of a PSI signal's lines and windows it reads:
// full or some, and 0, 1, 2 for avg10, avg60, avg300.
func psiLineWindow(s Signal) (full bool, window int, ok bool) {
	if !s.IsPSI() {
		return false, 0, false
	}
	name := string(s)
	full = strings.Contains(name, ".full.")
	switch {
	case strings.HasSuffix(name, ".avg10"):
		return full, 0, true
	case strings.HasSuffix(name, ".avg60"):
		return full, 1, true
	case strings.HasSuffix(name, ".avg300"):
		return full, 2, true
	}
	return false, 0, false
}

func psiText(v int64) string { return fmt.Sprintf("%.2f%%", float64(v)/100) }

// withoutExplained drops the thresholds of the signals the stalled pods explain.
func withoutExplained(ts []Threshold, explained map[Signal]string) []Threshold {
	if len(explained) == 0 {
		return ts
	}
	out := ts[:0:0]
	for _, t := range ts {
		if _, ok := explained[t.Signal]; !ok {
			out = append(out, t)
		}
	}
	return out
}
