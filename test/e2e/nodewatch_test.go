//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// nodeVersion is one version of the node as a watch delivered it.
type nodeVersion struct {
	at   time.Time
	node *corev1.Node
}

// nodeRecorder records every version of one node from a watch (not sampling): a condition
// or taint missing for a few milliseconds between two writes is one version here.
type nodeRecorder struct {
	mu       sync.Mutex
	versions []nodeVersion
	err      error
}

func recordNode(t *testing.T, client kubernetes.Interface, name string) *nodeRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node %s: %v", name, err)
	}
	w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: node.ResourceVersion})
	if err != nil {
		t.Fatalf("watching node %s: %v", name, err)
	}
	r := &nodeRecorder{versions: []nodeVersion{{time.Now(), node}}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			r.mu.Lock()
			if ok {
				r.versions = append(r.versions, nodeVersion{time.Now(), n})
			} else if r.err == nil && ctx.Err() == nil {
				r.err = fmt.Errorf("watch event %s: %v", ev.Type, ev.Object)
			}
			r.mu.Unlock()
		}
		r.mu.Lock()
		if r.err == nil && ctx.Err() == nil {
			r.err = fmt.Errorf("the watch on node %s ended early", name)
		}
		r.mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return r
}

// snapshot returns the versions so far; an error means versions may be missing.
func (r *nodeRecorder) snapshot() ([]nodeVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.versions), r.err
}

// intervals are the stretches during which pred held, over the recorded versions.
type interval struct{ from, to time.Time } // to is zero while it still holds

func intervals(versions []nodeVersion, pred func(*corev1.Node) bool) []interval {
	var out []interval
	on := false
	for _, v := range versions {
		switch now := pred(v.node); {
		case now && !on:
			out = append(out, interval{from: v.at})
		case !now && on:
			out[len(out)-1].to = v.at
		}
		on = pred(v.node)
	}
	return out
}

// lapses counts how often pred went from true to false within [from, to).
func lapses(versions []nodeVersion, from, to time.Time, pred func(*corev1.Node) bool) int {
	n := 0
	for _, iv := range intervals(versions, pred) {
		if !iv.to.IsZero() && !iv.to.Before(from) && iv.to.Before(to) {
			n++
		}
	}
	return n
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func nodeHasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// nodeWrite is one write to the node (object or status) in the audit log.
type nodeWrite struct {
	actor string
	at    time.Time
}

// auditedNodeWrites returns the successful writes (update, patch) to node name in the
// audit log, by actor: "evictiond" (its ServiceAccount), else the client's name from its
// user agent ("kubelet", "kube-controller-manager", ...: the e2e cluster's components share
// one admin user); "/status" is appended for writes to the status subresource.
func auditedNodeWrites(t *testing.T, auditPath, name string) []nodeWrite {
	t.Helper()
	var out []nodeWrite
	forEachAuditEvent(t, auditPath, "nodes", func(ev auditEvent) {
		if ev.ObjectRef.Name != name || (ev.Verb != "update" && ev.Verb != "patch") || ev.ResponseStatus.Code >= 300 {
			return
		}
		actor, _, _ := strings.Cut(ev.UserAgent, "/")
		if ev.User.Username == "system:serviceaccount:evictiond-system:evictiond" {
			actor = "evictiond"
		}
		if ev.ObjectRef.Subresource != "" {
			actor += "/" + ev.ObjectRef.Subresource
		}
		out = append(out, nodeWrite{actor, ev.RequestReceived})
	})
	return out
}

// auditedBindings returns when the scheduler bound each pod of namespace to a node.
func auditedBindings(t *testing.T, auditPath, namespace string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	forEachAuditEvent(t, auditPath, "pods", func(ev auditEvent) {
		if ev.ObjectRef.Namespace == namespace && ev.ObjectRef.Subresource == "binding" && ev.Verb == "create" && ev.ResponseStatus.Code < 300 {
			out[ev.ObjectRef.Name] = ev.RequestReceived
		}
	})
	return out
}

// writesBetween counts writes per actor within [from, to).
func writesBetween(writes []nodeWrite, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, w := range writes {
		if !w.at.Before(from) && w.at.Before(to) {
			out[w.actor]++
		}
	}
	return out
}

// perMinute formats counts over d as writes per minute, actors sorted.
func perMinute(counts map[string]int, d time.Duration) string {
	actors := slices.Collect(maps.Keys(counts))
	sort.Strings(actors)
	var parts []string
	total := 0
	for _, a := range actors {
		parts = append(parts, fmt.Sprintf("%s %.1f", a, float64(counts[a])/d.Minutes()))
		total += counts[a]
	}
	parts = append(parts, fmt.Sprintf("all %.1f", float64(total)/d.Minutes()))
	return strings.Join(parts, ", ")
}
