package agent

import (
	"context"
	"fmt"
	"time"
)

// Check is one liveness or readiness condition of the loop; the daemon's
// process serves them (daemon.Handler).
type Check struct {
	Name string
	// Fn returns nil when the condition holds.
	Fn func(ctx context.Context) error
}

// StatsFresh is ready while the loop completes passes and reads memory.
func (a *Agent) StatsFresh(maxAge time.Duration) Check {
	return Check{Name: "stats", Fn: func(context.Context) error {
		h := a.Health()
		switch {
		case h.LastPass.IsZero():
			return fmt.Errorf("no decision pass yet")
		case time.Since(h.LastPass) > maxAge:
			return fmt.Errorf("last decision pass %v ago (limit %v)", time.Since(h.LastPass).Round(time.Millisecond), maxAge)
		case h.Err != "":
			return fmt.Errorf("last pass failed: %s", h.Err)
		case !h.MemoryObserved:
			return fmt.Errorf("memory.available could not be read on the last pass")
		}
		return nil
	}}
}

// Live fails when the loop has been stuck longer than maxAge (a wedged agent
// should be restarted; a slow eviction wait is bounded well below it).
func (a *Agent) Live(maxAge time.Duration) Check {
	start := time.Now()
	return Check{Name: "loop", Fn: func(context.Context) error {
		h := a.Health()
		last := h.LastPass
		if last.IsZero() {
			last = start
		}
		if age := time.Since(last); age > maxAge {
			return fmt.Errorf("no decision pass for %v", age.Round(time.Second))
		}
		return nil
	}}
}
