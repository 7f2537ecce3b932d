package notify

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

// Bounds enforced by Validate. The PSI bounds are the kernel's
// (kernel/sched/psi.c: window 500ms..10s, 0 < stall <= window).
const (
	MinPollInterval = 10 * time.Millisecond
	// MinPollMinInterval bounds PollMinInterval from below.
	MinPollMinInterval = time.Millisecond
	MaxPollInterval    = 10 * time.Second
	MinRearmInterval   = 100 * time.Millisecond
	MaxRearmInterval   = time.Minute
	MinPSIWindow       = 500 * time.Millisecond
	MaxPSIWindow       = 10 * time.Second
	// unprivilegedPSIWindowStep: without CAP_SYS_RESOURCE the kernel accepts
	// only windows that are a multiple of 2s (they ride the 2s averaging work).
	unprivilegedPSIWindowStep = 2 * time.Second
)

// withDefaults fills zero values.
func (o Options) withDefaults() Options {
	if o.CgroupRoot == "" {
		o.CgroupRoot = DefaultCgroupRoot
	}
	if o.KubepodsCgroup == "" {
		o.KubepodsCgroup = DefaultKubepodsCgroup
	}
	if o.ProcRoot == "" {
		o.ProcRoot = DefaultProcRoot
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PollMinInterval == 0 {
		o.PollMinInterval = min(DefaultPollMinInterval, o.PollInterval)
	}
	if o.PollIdleInterval == 0 {
		o.PollIdleInterval = max(DefaultPollIdleInterval, o.PollInterval)
	}
	if o.PollRampRate == 0 {
		o.PollRampRate = DefaultPollRampRate
	}
	if o.RearmInterval == 0 {
		o.RearmInterval = DefaultRearmInterval
	}
	if o.PSI.Type == "" {
		o.PSI.Type = PSISome
	}
	if o.PSI.Stall == 0 {
		o.PSI.Stall = DefaultPSIStall
	}
	if o.PSI.Window == 0 {
		o.PSI.Window = DefaultPSIWindow
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate checks options after defaults are applied. Every error names the
// field, the value and the rule.
func (o Options) Validate() error {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("notify: %s=%v: %s", field, value, rule))
	}
	if !path.IsAbs(o.CgroupRoot) {
		bad("cgroupRoot", o.CgroupRoot, "must be an absolute path")
	}
	if !path.IsAbs(o.ProcRoot) {
		bad("procRoot", o.ProcRoot, "must be an absolute path")
	}
	if o.KubepodsCgroup == "" || path.IsAbs(o.KubepodsCgroup) || strings.Contains(o.KubepodsCgroup, "..") {
		bad("kubepodsCgroup", o.KubepodsCgroup, "must be a relative cgroup path without '..' (e.g. kubepods or kubepods.slice)")
	}
	if o.Mode < CgroupModeAuto || o.Mode > CgroupModeV2 {
		bad("mode", int(o.Mode), "must be auto, v1 or v2")
	}
	if o.PollInterval < MinPollInterval || o.PollInterval > MaxPollInterval {
		bad("pollInterval", o.PollInterval, fmt.Sprintf("must be within %v..%v", MinPollInterval, MaxPollInterval))
	}
	if o.PollMinInterval < MinPollMinInterval || o.PollMinInterval > o.PollInterval {
		bad("pollMinInterval", o.PollMinInterval, fmt.Sprintf("must be within %v..pollInterval (%v)", MinPollMinInterval, o.PollInterval))
	}
	if o.PollIdleInterval < o.PollInterval || o.PollIdleInterval > MaxPollInterval {
		bad("pollIdleInterval", o.PollIdleInterval, fmt.Sprintf("must be within pollInterval (%v)..%v", o.PollInterval, MaxPollInterval))
	}
	if o.PollRampRate <= 0 {
		bad("pollRampRate", o.PollRampRate, "must be > 0 bytes per second")
	}
	if o.RearmInterval < MinRearmInterval || o.RearmInterval > MaxRearmInterval {
		bad("rearmInterval", o.RearmInterval, fmt.Sprintf("must be within %v..%v", MinRearmInterval, MaxRearmInterval))
	}
	if o.PSI.Type != PSISome && o.PSI.Type != PSIFull {
		bad("psi.type", o.PSI.Type, `must be "some" or "full"`)
	}
	if o.PSI.Window < MinPSIWindow || o.PSI.Window > MaxPSIWindow {
		bad("psi.window", o.PSI.Window, fmt.Sprintf("must be within %v..%v (kernel limit)", MinPSIWindow, MaxPSIWindow))
	}
	if o.PSI.Stall <= 0 || o.PSI.Stall > o.PSI.Window {
		bad("psi.stall", o.PSI.Stall, fmt.Sprintf("must be > 0 and <= psi.window (%v)", o.PSI.Window))
	}
	if o.PSI.Window%time.Microsecond != 0 || o.PSI.Stall%time.Microsecond != 0 {
		bad("psi.stall/psi.window", fmt.Sprintf("%v/%v", o.PSI.Stall, o.PSI.Window), "must be whole microseconds (the kernel's unit)")
	}
	seen := map[string]int{}
	for i, t := range o.Thresholds {
		field := fmt.Sprintf("thresholds[%d]", i)
		if j, dup := seen[t.name()]; dup {
			bad(field, t.name(), fmt.Sprintf("duplicates thresholds[%d]: one hard and one soft threshold per signal", j))
		}
		seen[t.name()] = i
		if !t.memory() && t.Signal != policy.SignalPIDAvailable && t.Signal != policy.SignalNodeFsAvailable {
			bad(field+".signal", t.Signal, fmt.Sprintf("must be %s, %s, %s or %s", policy.SignalMemoryAvailable, policy.SignalAllocatableMemoryAvailable,
				policy.SignalPIDAvailable, policy.SignalNodeFsAvailable))
		}
		switch {
		case t.Bound != "" && t.Bound != policy.BoundMax && t.Bound != policy.BoundMin:
			bad(field+".bound", t.Bound, "must be max, min or empty")
		case t.Bound != "" && (t.Available <= 0 || t.Percentage <= 0 || t.Percentage >= 1):
			bad(field, fmt.Sprintf("available=%d percentage=%g bound=%s", t.Available, t.Percentage, t.Bound), "a bounded threshold needs available > 0 and percentage within (0, 1)")
		case t.Bound != "":
		case t.Available != 0 && t.Percentage != 0:
			bad(field, fmt.Sprintf("available=%d percentage=%g", t.Available, t.Percentage), "set exactly one of available and percentage")
		case t.Available < 0:
			bad(field+".available", t.Available, "must be > 0 bytes")
		case t.Percentage < 0 || t.Percentage >= 1:
			bad(field+".percentage", t.Percentage, "must be within (0, 1)")
		case t.Available == 0 && t.Percentage == 0:
			bad(field, "0", "a zero threshold never fires; leave it out instead")
		}
	}
	return errors.Join(errs...)
}

// adaptPSIWindow rounds a window the kernel refused for lack of privilege up
// to the next multiple of 2s (at most MaxPSIWindow) and scales the stall to
// keep the same stall percentage.
func adaptPSIWindow(stall, window time.Duration) (time.Duration, time.Duration, bool) {
	if window%unprivilegedPSIWindowStep == 0 {
		return stall, window, false
	}
	adapted := (window/unprivilegedPSIWindowStep + 1) * unprivilegedPSIWindowStep
	if adapted > MaxPSIWindow {
		adapted = MaxPSIWindow
	}
	scaled := time.Duration(float64(stall) * float64(adapted) / float64(window)).Truncate(time.Microsecond)
	if scaled > adapted {
		scaled = adapted
	}
	return scaled, adapted, true
}
