package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/evictiond/evictiond/internal/agent"
)

// CachedCheck runs fn at most once per ttl and answers from the last result
// in between, so frequent probes cost the API server or the runtime nothing.
func CachedCheck(name string, ttl time.Duration, fn func(ctx context.Context) error) agent.Check {
	var mu sync.Mutex
	var at time.Time
	var last error
	return agent.Check{Name: name, Fn: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last
		}
		last, at = fn(ctx), time.Now()
		return last
	}}
}

// Handler serves /metrics, /healthz (liveness) and /readyz (readiness).
//
// /metrics is not compressed, whatever the scraper accepts: the body is about 21 KB (4.7 KB
// gzipped), and a gzip writer is 0.75–1.2 MB of compressor state at every level of
// compress/flate, which promhttp keeps in a pool across the next garbage collection after each
// scrape. At a scrape every 15 s the idle agent held it most of the time, and the collector
// counted it as live heap when it set its next goal (docs/scale.md).
func Handler(reg *prometheus.Registry, live []agent.Check, ready []agent.Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, DisableCompression: true}))
	mux.HandleFunc("/healthz", checksHandler(live))
	mux.HandleFunc("/readyz", checksHandler(ready))
	return mux
}

func checksHandler(checks []agent.Check) http.HandlerFunc {
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
