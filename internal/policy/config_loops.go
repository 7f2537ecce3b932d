package policy

import (
	"fmt"
	"time"
)

// EvictionLoopsSettings configure eviction loop detection and backoff
// (docs/configuration.md, evictionLoops).
type EvictionLoopsSettings struct {
	// Enabled: default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Count evictions of one workload's pods on this node within Window are a
	// loop. Default 3 (2..100).
	Count *int `json:"count,omitempty"`
	// Window the evictions are counted in. Default 30m.
	Window string `json:"window,omitempty"`
	// InitialBackoff: how long the node's pressure condition (and evictiond's
	// NoSchedule taint) is held from the eviction that makes the loop; each
	// further eviction in the loop doubles it. Default 10m.
	InitialBackoff string `json:"initialBackoff,omitempty"`
	// MaxBackoff caps the doubling. Default 1h.
	MaxBackoff string `json:"maxBackoff,omitempty"`
}

// Defaults of the evictionLoops section.
const (
	DefaultLoopCount          = 3
	DefaultLoopWindow         = 30 * time.Minute
	DefaultLoopInitialBackoff = 10 * time.Minute
	DefaultLoopMaxBackoff     = time.Hour
)

// loops compiles the evictionLoops section.
func (c *compiler) loops(raw EvictionLoopsSettings) LoopsConfig {
	out := LoopsConfig{
		Enabled:        boolOr(raw.Enabled, true),
		Count:          DefaultLoopCount,
		Window:         c.duration("evictionLoops.window", raw.Window, DefaultLoopWindow, time.Minute, 24*time.Hour),
		InitialBackoff: c.duration("evictionLoops.initialBackoff", raw.InitialBackoff, DefaultLoopInitialBackoff, time.Second, 24*time.Hour),
		MaxBackoff:     c.duration("evictionLoops.maxBackoff", raw.MaxBackoff, DefaultLoopMaxBackoff, time.Second, 24*time.Hour),
	}
	if raw.Count != nil {
		if n := *raw.Count; n < 2 || n > 100 {
			c.fail("evictionLoops.count", "", fmt.Sprint(n), "must be between 2 and 100 (one eviction is not a loop; unset: 3)")
		} else {
			out.Count = n
		}
	}
	if out.MaxBackoff < out.InitialBackoff {
		c.fail("evictionLoops.maxBackoff", "", raw.MaxBackoff, fmt.Sprintf("must be at least evictionLoops.initialBackoff (%v)", out.InitialBackoff))
	}
	return out
}

// normalizeLoops is the evictionLoops section with every default filled in.
func normalizeLoops(l LoopsConfig) EvictionLoopsSettings {
	return EvictionLoopsSettings{Enabled: ptr(l.Enabled), Count: ptr(l.Count), Window: l.Window.String(),
		InitialBackoff: l.InitialBackoff.String(), MaxBackoff: l.MaxBackoff.String()}
}
