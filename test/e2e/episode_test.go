//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// memoryEpisode is one memory-pressure episode with evictiond deployed: two bystanders (a
// Guaranteed pod and a Burstable pod within its request) and a Burstable hog ramping far
// beyond its request, until the hog is gone.
type memoryEpisode struct {
	Namespace  string
	HogRateMiB int
	// Filled in by run:
	Bystanders     []*corev1.Pod // their state after the episode
	HogLast        *corev1.Pod   // the hog's last seen state before it was deleted
	OOMKills       int64         // kernel OOM kills on the machine during the episode
	Evicted        []corev1.Event
	MinAvailable   int64         // lowest kubepods allocatableMemory.available seen
	HogLifetime    time.Duration // hog creation to deletion
	PressureEvents []corev1.Event
}

// run plays the episode; progress, when set, receives a line for every second of the ramp.
func (e *memoryEpisode) run(t *testing.T, c *cluster.Cluster, progress func(string)) {
	t.Helper()
	createNamespace(t, c.Client, e.Namespace)
	ctx := context.Background()
	ns := e.Namespace

	bystanders := startBystanders(t, c, ns)
	oomBefore := machineOOMKills(t)

	hog := podOnNode(ns, "hog", workloadContainer("memhog", []string{fmt.Sprintf("-rate-mib=%d", e.HogRateMiB)}, resources("memory", "64Mi"), nil))
	created, err := c.Client.CoreV1().Pods(ns).Create(ctx, hog, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod hog: %v", err)
	}
	stopWatch := make(chan struct{})
	minAvail := make(chan int64, 1)
	go func() {
		lowest := int64(1 << 62)
		lastShown := time.Now()
		ticker := time.NewTicker(10 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-stopWatch:
				minAvail <- lowest
				return
			case <-ticker.C:
			}
			m, err := cluster.ReadPodsMemory()
			if err != nil {
				continue
			}
			lowest = min(lowest, m.Available())
			if progress != nil && time.Since(lastShown) >= time.Second {
				lastShown = time.Now()
				progress(fmt.Sprintf("kubepods: working set %4d MiB of %d MiB, %4d MiB available", m.WorkingSet>>20, m.Limit>>20, m.Available()>>20))
			}
		}
	}()
	e.HogLast = waitPodGone(t, c, ns, "hog", created.UID, 2*time.Minute)
	e.HogLifetime = time.Since(created.CreationTimestamp.Time)
	close(stopWatch)
	e.MinAvailable = <-minAvail
	e.OOMKills = machineOOMKills(t) - oomBefore
	e.Evicted = evictionEvents(t, c, ns)
	for _, p := range bystanders {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("bystander %s: %v", p.Name, err)
		}
		e.Bystanders = append(e.Bystanders, got)
	}
	nodeEvents, err := c.Client.CoreV1().Events(corev1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ev := range nodeEvents.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.Source.Component == "evictiond" {
				e.PressureEvents = append(e.PressureEvents, ev)
			}
		}
	}
}

// evictiondMetrics scrapes evictiond's /metrics with the scraper's ServiceAccount token
// and returns the sample lines whose names start with one of prefixes.
func evictiondMetrics(c *cluster.Cluster, prefixes ...string) ([]string, error) {
	body, err := c.EvictiondMetrics(context.Background())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	return out, nil
}
