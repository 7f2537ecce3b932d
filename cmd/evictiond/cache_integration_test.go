//go:build integration

package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/simulate"
)

// TestRunPodCacheSeesPodsSoonAfterAPIServerRestarts restarts the real API server
// twice, a minute apart (as make soak's cycles do, or a crash-looping or upgraded
// control plane), and then creates a pod on the agent's node: the pods the loop
// decides about (the daemon's pod cache, what agent.Pods lists) must include it
// within 15 s. With client-go's shared informers it failed (pod unseen after 15 s):
// the re-watch after the second restart got "too old resource version" (410), and
// the informer waited its backoff, whose steps from the first outage it kept for two
// minutes, before listing again; the short soak's memory hog created then was not
// among the loop's pods, and a hard threshold found nothing to evict.
func TestRunPodCacheSeesPodsSoonAfterAPIServerRestarts(t *testing.T) {
	const node, ns = "cache-node", "cache-restarts"
	createNode(t, node)
	createPods(t, ns, node, 1)
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := daemon.NewClient(rest.CopyConfig(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client,
		Node: simulate.NewNode(&simulate.Scenario{Node: simulate.NodeSpec{Name: node}}, time.Now)},
		daemon.Options{NodeName: node, NodeStatus: true, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	apiUp := true
	t.Cleanup(func() {
		if !apiUp {
			if err := env.StartAPIServer(); err != nil {
				t.Errorf("restarting the API server: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	// Two restarts a minute apart, 5 s down each: make soak's API server
	// restarts (every other cycle).
	for i, gap := range []time.Duration{60 * time.Second, 0} {
		env.StopAPIServer()
		apiUp = false
		time.Sleep(5 * time.Second)
		if err := env.StartAPIServer(); err != nil {
			t.Fatalf("restarting the API server: %v", err)
		}
		apiUp = true
		t.Logf("restart %d done", i+1)
		time.Sleep(gap)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after-restarts", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	for {
		pods, err := d.Informers.ListPods()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range pods {
			found = found || p.Name == pod.Name
		}
		if found {
			t.Logf("pod created after 2 API server restarts among the loop's pods after %v", time.Since(created).Round(time.Millisecond))
			break
		}
		if time.Since(created) > 15*time.Second {
			t.Fatalf("pod %s/%s created after 2 API server restarts is not among the loop's pods after 15 s (%d pods listed)", ns, pod.Name, len(pods))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "node cache listed again") {
		t.Errorf("the caches' recoveries are not in the daemon's log:\n%s", logs.String())
	}
}
