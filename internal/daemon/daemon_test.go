package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/policy"
)

type noStats struct{}

func (noStats) Observe(context.Context, []*v1.Pod) agent.Observed        { return agent.Observed{} }
func (noStats) ObserveUsage(context.Context, []*v1.Pod, *agent.Observed) {}

// An evictor New cannot build (the local stop without a CRI client) fails New
// after the informers started: New must stop them itself and return.
func TestNewFailingAfterTheInformersStartedReturnsAndStopsThem(t *testing.T) {
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\neviction: {apiUnreachable: {criStop: true}}\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	_, err := New(context.Background(), cfg, Deps{Client: fake.NewClientset(), Stats: noStats{}},
		Options{NodeName: "node-1", NodeStatus: true, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "LocalStop.Stopper") {
		t.Fatalf("New = %v, want the evictor's LocalStop error", err)
	}
}

func TestRestartOnlyChangesNamesWhatAReloadCannotApply(t *testing.T) {
	load := func(extra string) *policy.Config {
		c, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + extra))
		if errs != nil {
			t.Fatal(errs)
		}
		return c
	}
	base := load("")
	if got := RestartOnlyChanges(base, load("eviction: {rateLimits: {perMinute: 20}}\ndryRun: true\n")); got != "" {
		t.Errorf("rate limits and dryRun reported as restart-only: %q", got)
	}
	if got := RestartOnlyChanges(base, load("stats: {housekeepingInterval: 20s}\nreclaim: {imageGC: {minAge: 5m}}\n")); got != "stats.housekeepingInterval, reclaim.*" {
		t.Errorf("RestartOnlyChanges = %q", got)
	}
}
