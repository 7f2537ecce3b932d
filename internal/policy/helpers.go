package policy

import (
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// This file holds the pure steps of a pass, each a function over plain
// values, as the kubelet's helpers.go does.

// thresholdsMet returns the thresholds met by the observations: threshold >
// available, or with enforceMinReclaim threshold + minimum reclaim > available.
// A signal with no observation is skipped: a missing reading never causes an
// eviction.
func thresholdsMet(ts []Threshold, obs Observations, enforceMinReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		q := t.quantity(o.Capacity)
		if enforceMinReclaim {
			q += t.minReclaim(o.Capacity)
		}
		if q > o.Available {
			out = append(out, t)
		}
	}
	return out
}

// mergeThresholds returns a with every threshold of b not already in a.
func mergeThresholds(a, b []Threshold) []Threshold {
	out := append([]Threshold(nil), a...)
	for _, t := range b {
		if !hasThreshold(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func hasThreshold(ts []Threshold, t Threshold) bool {
	for _, x := range ts {
		if x.id() == t.id() {
			return true
		}
	}
	return false
}

// thresholdsFirstObservedAt keeps the first-seen time of still-met thresholds
// and stamps new ones with now.
func thresholdsFirstObservedAt(ts []Threshold, last map[string]time.Time, now time.Time) map[string]time.Time {
	out := make(map[string]time.Time, len(ts))
	for _, t := range ts {
		if at, ok := last[t.id()]; ok {
			out[t.id()] = at
		} else {
			out[t.id()] = now
		}
	}
	return out
}

// thresholdsMetGracePeriod keeps the thresholds whose grace period has
// elapsed since they were first observed; hard ones pass at once.
func thresholdsMetGracePeriod(ts []Threshold, firstObserved map[string]time.Time, now time.Time) []Threshold {
	var out []Threshold
	for _, t := range ts {
		at, ok := firstObserved[t.id()]
		if !ok {
			continue
		}
		if now.Sub(at) >= t.GracePeriod {
			out = append(out, t)
		}
	}
	return out
}

// nodeConditions maps thresholds to node conditions, ignoring grace periods
// (soft thresholds set the condition at once, as in the kubelet).
func nodeConditions(ts []Threshold) []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, t := range ts {
		c := t.Signal.Condition()
		if !hasCondition(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// ConditionSignals lists, for each condition, the signals whose thresholds are
// met now, in registry order: what a condition's message names as its cause.
func (a *Assessment) ConditionSignals() map[v1.NodeConditionType][]string {
	out := map[v1.NodeConditionType][]string{}
	for _, t := range sortedByRegistry(a.Met) {
		c, name := t.Signal.Condition(), string(t.Signal)
		if c != "" && !slices.Contains(out[c], name) {
			out[c] = append(out[c], name)
		}
	}
	return out
}

func sortedByRegistry(met []ThresholdStatus) []Threshold {
	ts := make([]Threshold, len(met))
	for i, m := range met {
		ts[i] = m.Threshold
	}
	sortThresholds(ts)
	return ts
}

func hasCondition(cs []v1.NodeConditionType, c v1.NodeConditionType) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// nodeConditionsLastObservedAt stamps observed conditions with now and keeps
// the others' previous times.
func nodeConditionsLastObservedAt(cs []v1.NodeConditionType, last map[v1.NodeConditionType]time.Time, now time.Time) map[v1.NodeConditionType]time.Time {
	out := make(map[v1.NodeConditionType]time.Time, len(last)+len(cs))
	for c, at := range last {
		out[c] = at
	}
	for _, c := range cs {
		out[c] = now
	}
	return out
}

// nodeConditionsObservedSince returns the conditions observed within the
// transition period, in a fixed order.
func nodeConditionsObservedSince(last map[v1.NodeConditionType]time.Time, period time.Duration, now time.Time) []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if at, ok := last[c]; ok && now.Sub(at) < period {
			out = append(out, c)
		}
	}
	return out
}

// thresholdsUpdatedStats keeps the thresholds whose observation is newer than
// the previous pass's (or has no previous one): the kubelet's guard against
// acting twice on one stale sample.
func thresholdsUpdatedStats(ts []Threshold, obs, last Observations) []Threshold {
	var out []Threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		prev, ok := last[t.Signal]
		if !ok || prev.Time.IsZero() || o.Time.After(prev.Time) {
			out = append(out, t)
		}
	}
	return out
}

// byEvictionPriority orders thresholds: memory signals first (the kubelet's
// rule), then the rest in registry order, hard before soft; stable and total.
func byEvictionPriority(ts []Threshold) []Threshold {
	out := append([]Threshold(nil), ts...)
	order := map[Signal]int{}
	for i, s := range Signals() {
		order[s] = i
	}
	rank := func(t Threshold) int {
		r := order[t.Signal]
		if t.Signal.IsMemory() {
			r -= 1000
		}
		return r
	}
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := rank(out[i]), rank(out[j])
		if ri != rj {
			return ri < rj
		}
		return out[i].Hard() && !out[j].Hard()
	})
	return out
}

// ThresholdsFor returns the thresholds in force for a filesystem layout:
// containerfs.* thresholds are copied from nodefs.* (single filesystem, or
// imagefs + containerfs split) or from imagefs.* (dedicated imagefs without a
// split), as the kubelet's UpdateContainerFsThresholds does.
func ThresholdsFor(ts []Threshold, layout FilesystemLayout) []Threshold {
	out := append([]Threshold(nil), ts...)
	from := map[Signal]Signal{
		SignalNodeFsAvailable:  SignalContainerFsAvailable,
		SignalNodeFsInodesFree: SignalContainerFsInodesFree,
	}
	if layout.DedicatedImageFs && !layout.SplitContainerFs {
		from = map[Signal]Signal{
			SignalImageFsAvailable:  SignalContainerFsAvailable,
			SignalImageFsInodesFree: SignalContainerFsInodesFree,
		}
	}
	for _, t := range ts {
		if to, ok := from[t.Signal]; ok {
			d := t
			d.Signal = to
			d.DerivedFrom = t.Signal
			out = append(out, d)
		}
	}
	sortThresholds(out)
	return out
}

// nodeReclaimSteps is the kubelet's table of node-level reclaim per signal and
// layout (buildSignalToNodeReclaimFuncs), with evictiond's dead-pod log
// cleanup added wherever logs live (nodefs), including the dedicated-imagefs
// nodefs case where the kubelet runs nothing (kubernetes#129616).
func nodeReclaimSteps(s Signal, layout FilesystemLayout) []ReclaimStep {
	fs := signalFilesystem(s, layout)
	switch {
	case s.Resource() != ResourceEphemeralStorage && s.Resource() != ResourceInodes:
		return nil
	case !layout.DedicatedImageFs:
		return []ReclaimStep{ReclaimContainerGC, ReclaimPodLogs, ReclaimImageGC}
	case layout.SplitContainerFs:
		if fs == fsImage {
			return []ReclaimStep{ReclaimImageGC}
		}
		return []ReclaimStep{ReclaimContainerGC, ReclaimPodLogs}
	default: // dedicated imagefs, writable layers with the images
		if fs == fsImage {
			return []ReclaimStep{ReclaimContainerGC, ReclaimImageGC}
		}
		return []ReclaimStep{ReclaimContainerGC, ReclaimPodLogs}
	}
}

type filesystem int

const (
	fsNone filesystem = iota
	fsNode
	fsImage
)

// signalFilesystem tells which filesystem a disk signal measures, folding
// containerfs into nodefs or imagefs by layout.
func signalFilesystem(s Signal, layout FilesystemLayout) filesystem {
	switch s {
	case SignalNodeFsAvailable, SignalNodeFsInodesFree:
		return fsNode
	case SignalImageFsAvailable, SignalImageFsInodesFree:
		return fsImage
	case SignalContainerFsAvailable, SignalContainerFsInodesFree:
		if layout.DedicatedImageFs && !layout.SplitContainerFs {
			return fsImage
		}
		return fsNode
	}
	return fsNone
}

// SameFilesystem lists the disk signals of s's unit (bytes or inodes) that
// measure the filesystem s measures under layout: what a reclaim step that
// frees space for s frees for each of them.
func SameFilesystem(s Signal, layout FilesystemLayout) []Signal {
	on := func(s Signal) filesystem {
		if !layout.DedicatedImageFs && signalFilesystem(s, layout) != fsNone {
			return fsNode // one filesystem holds everything
		}
		return signalFilesystem(s, layout)
	}
	all := []Signal{SignalNodeFsAvailable, SignalImageFsAvailable, SignalContainerFsAvailable}
	if s.Resource() == ResourceInodes {
		all = []Signal{SignalNodeFsInodesFree, SignalImageFsInodesFree, SignalContainerFsInodesFree}
	}
	fs := on(s)
	var out []Signal
	for _, c := range all {
		if fs != fsNone && on(c) == fs {
			out = append(out, c)
		}
	}
	return out
}
