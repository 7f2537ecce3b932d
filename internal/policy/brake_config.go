package policy

import (
	"fmt"
	"math"
	"time"
)

// brake compiles the brake section. The freeze must outlast
// eviction.apiUnreachable.after when the local CRI stop is on, or a frozen
// pod would be thawed (and the node lost) just before the stop that ends it.
func (c *compiler) brake(raw BrakeSettings, apiDown APIUnreachableConfig) BrakeConfig {
	b := BrakeConfig{
		Enabled:             boolOr(raw.Enabled, true),
		InitialEvictionPath: c.duration("brake.initialEvictionPath", raw.InitialEvictionPath, DefaultBrakeInitialEvictionPath, 10*time.Millisecond, 5*time.Minute),
		MaxFreeze:           c.duration("brake.maxFreeze", raw.MaxFreeze, DefaultBrakeMaxFreeze, 100*time.Millisecond, 10*time.Minute),
		SampleInterval:      c.duration("brake.sampleInterval", raw.SampleInterval, DefaultBrakeSampleInterval, time.Millisecond, 500*time.Millisecond),
		SafetyFactor:        DefaultBrakeSafetyFactor,
		Realtime:            true,
	}
	if raw.Realtime != nil {
		b.Realtime = boolOr(raw.Realtime.Enabled, true)
	}
	if raw.EvictionPath != "" && raw.EvictionPath != BrakeEvictionPathMeasured {
		if _, err := time.ParseDuration(raw.EvictionPath); err != nil {
			c.fail("brake.evictionPath", "", raw.EvictionPath, `must be "`+BrakeEvictionPathMeasured+`" or a duration like 1500ms`)
		} else {
			b.EvictionPath = c.duration("brake.evictionPath", raw.EvictionPath, 0, 10*time.Millisecond, 5*time.Minute)
		}
	}
	if raw.SafetyFactor != nil {
		// Unset is the default; an explicit 0 is out of range like any other value.
		if sf := *raw.SafetyFactor; math.IsNaN(sf) || sf < 1 || sf > 10 {
			c.fail("brake.safetyFactor", "", fmt.Sprint(sf), "must be between 1 and 10 (unset: 1.5)")
		} else {
			b.SafetyFactor = sf
		}
	}
	if b.Enabled && apiDown.CRIStop && b.MaxFreeze <= apiDown.After {
		c.fail("brake.maxFreeze", "", b.MaxFreeze.String(),
			fmt.Sprintf("must exceed eviction.apiUnreachable.after (%v) while eviction.apiUnreachable.criStop is on, so a frozen pod is still frozen when the local stop ends it", apiDown.After))
	}
	return b
}

// normalizeBrake is the brake section with every default filled in.
func normalizeBrake(b BrakeConfig) BrakeSettings {
	path := BrakeEvictionPathMeasured
	if b.EvictionPath > 0 {
		path = b.EvictionPath.String()
	}
	return BrakeSettings{Enabled: ptr(b.Enabled), EvictionPath: path, InitialEvictionPath: b.InitialEvictionPath.String(),
		SafetyFactor: ptr(b.SafetyFactor), MaxFreeze: b.MaxFreeze.String(), SampleInterval: b.SampleInterval.String(),
		Realtime: &BrakeRealtimeSettings{Enabled: ptr(b.Realtime)}}
}
