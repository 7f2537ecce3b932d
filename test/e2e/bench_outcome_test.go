//go:build e2e && bench_ramp

package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// hogSetup is one cluster configuration of the fork-bomb and disk-filler benches: the
// kubelet alone, or with evictiond, with or without its brake.
type hogSetup struct {
	name      string
	evictiond bool
	brake     bool
}

// hogOutcome is what ended a bench episode's pod "hog", read from the namespace's Events: the
// pods evicted (component:pod, each once, in order: the kubelet records one Event per
// attempt), how many of them were bystanders, and whether evictiond's brake killed the hog.
type hogOutcome struct {
	evicted    []string
	seen       map[string]bool
	bystanders int
	braked     bool
}

func readHogOutcome(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) hogOutcome {
	o := hogOutcome{seen: map[string]bool{}}
	for _, e := range evictionEvents(t, c, ns) {
		key := e.Source.Component + ":" + e.InvolvedObject.Name
		if o.seen[key] {
			continue
		}
		o.seen[key] = true
		o.evicted = append(o.evicted, key)
		if e.InvolvedObject.Name != "hog" {
			o.bystanders++
		}
	}
	if list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range list.Items {
			if e.Reason == "Braked" && e.InvolvedObject.Name == "hog" {
				o.braked = true
			}
		}
	}
	return o
}

// stoppedBy names who stopped a hog that is not a memory hog (no OOM killer in the picture):
// the brake, an eviction, nobody before the episode's bound (ended false), or the hog itself
// (last is its final state).
func (o hogOutcome) stoppedBy(ended bool, last *corev1.Pod) string {
	switch {
	case o.braked:
		return "brake kill (evictiond)"
	case o.seen["evictiond:hog"] && o.seen["kubelet:hog"]:
		return "eviction (evictiond and kubelet)"
	case o.seen["evictiond:hog"]:
		return "eviction (evictiond)"
	case o.seen["kubelet:hog"]:
		return "eviction (kubelet)"
	case !ended:
		return "nobody in 90 s"
	default:
		return "ended by itself: " + describeStatus(last)
	}
}

// latencySummary is "median / worst" of one latency over the runs that acted (acted reports
// whether a run's value is a latency), "(n of m runs)" added when some did not, "—" when none did.
func latencySummary[R any](rs []R, latency func(R) time.Duration, acted func(time.Duration) bool) string {
	var ds []time.Duration
	for _, r := range rs {
		if d := latency(r); acted(d) {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return "—"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	out := fmt.Sprintf("%s / %s", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	if len(ds) < len(rs) {
		out += fmt.Sprintf(" (%d of %d runs)", len(ds), len(rs))
	}
	return out
}
