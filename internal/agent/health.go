package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness condition.
type Check struct {
	Name string
	// Fn returns nil when the condition holds.
	Fn func(ctx context.Context) error
}

// CachedCheck runs fn at most once per ttl and answers from the last result
// in between, so frequent probes cost the API server or the runtime nothing.
func CachedCheck(name string, ttl time.Duration, fn func(ctx context.Context) error) Check {
	var mu sync.Mutex
	var at time.Time
	var last error
	return Check{Name: name, Fn: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last
		}
		last, at = fn(ctx), time.Now()
		return last
	}}
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

// Handler serves /metrics, /healthz (liveness) and /readyz (readiness).
func Handler(reg *prometheus.Registry, live []Check, ready []Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", checksHandler(live))
	mux.HandleFunc("/readyz", checksHandler(ready))
	return mux
}

func checksHandler(checks []Check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		var failed []string
		var lines []string
		for _, c := range checks {
			if err := c.Fn(ctx); err != nil {
				failed = append(failed, c.Name)
				lines = append(lines, fmt.Sprintf("[-] %s: %v", c.Name, err))
			} else {
				lines = append(lines, fmt.Sprintf("[+] %s ok", c.Name))
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%s\nfailed: %s\n", strings.Join(lines, "\n"), strings.Join(failed, ", "))
			return
		}
		fmt.Fprintf(w, "%s\nok\n", strings.Join(lines, "\n"))
	}
}
