//go:build integration

package kube

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"
)

// The loop's remedy for a pod cache behind the node: the agent's own ServiceAccount
// (the shipped RBAC, bound to its pod) lists its node's pods from the API server,
// those of other nodes never; a second call within directListInterval answers from
// the first list without a request.
func TestListPodsDirectListsOnlyThisNodesPodsAndIsRateLimited(t *testing.T) {
	n := newTestNode(t)
	other := newTestNode(t)
	createPod(t, n.namespace, "a", n.name, nil, nil)
	createPod(t, other.namespace, "elsewhere", other.name, nil, nil)
	inf, err := NewNodeInformers(n.agent, n.name)
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		pods, err := inf.ListPodsDirect(context.Background())
		if err != nil {
			t.Fatalf("ListPodsDirect: %v", err)
		}
		var out []string
		for _, p := range pods {
			if p.ManagedFields != nil {
				t.Errorf("pod %s/%s keeps its managedFields", p.Namespace, p.Name)
			}
			out = append(out, p.Namespace+"/"+p.Name)
		}
		sort.Strings(out)
		return out
	}
	// The node's pods: the agent's own (in evictiond-system) and "a".
	want := []string{agentNamespace + "/evictiond-" + n.name, n.namespace + "/a"}
	if got := names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("direct list: %v, want %v", got, want)
	}
	createPod(t, n.namespace, "b", n.name, nil, nil)
	if got := names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("second call within %v: %v, want the first answer %v (no request)", directListInterval, got, want)
	}
	inf.freshMu.Lock()
	inf.lastFresh = time.Now().Add(-directListInterval)
	inf.freshMu.Unlock()
	want = append(want, n.namespace+"/b")
	if got := names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after %v: %v, want %v", directListInterval, got, want)
	}
}
