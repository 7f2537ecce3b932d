//go:build integration

package kube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// BenchmarkEvictThroughAPI is one Eviction API call (UID precondition, no PDB) against
// the real API server, made as the agent's ServiceAccount through the admission policy.
func BenchmarkEvictThroughAPI(b *testing.B) {
	n := newTestNode(b)
	ev, err := NewEvictor(n.agent, record.NewFakeRecorder(0), func() EvictorOptions { o := evictorOptions(b, n.name); o.Logger = testLogger(b); return o }())
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, 0, b.N)
	for i := range b.N {
		pods = append(pods, createPod(b, n.namespace, fmt.Sprintf("p%d", i), n.name, nil, nil))
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := ev.evictThroughAPI(ctx, candidateFor(pods[i], true)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConditionReassert is the time from another writer flipping evictiond's
// MemoryPressure entry to False until the API server holds evictiond's True again
// (one kubelet-style write, the watch event, evictiond's patch, one GET to observe it):
// the length of each dip of the standard condition in nodeStatus.conditions: standard.
func BenchmarkConditionReassert(b *testing.B) {
	n := newTestNode(b)
	status := startNodeStatus(b, n, NodeStatusOptions{Conditions: ConditionsStandard})
	status.SetConditions([]corev1.NodeConditionType{corev1.NodeMemoryPressure}, nil)
	held := func() (bool, error) {
		s, r := conditionOf(getNode(b, n.name), corev1.NodeMemoryPressure)
		return s == corev1.ConditionTrue && r == ReasonMemoryPressure, nil
	}
	waitFor(b, 5*time.Second, "MemoryPressure held", held)
	b.ResetTimer()
	for range b.N {
		writeConditionAsKubelet(b, n.name, kubeletSufficientMemory())
		waitFor(b, 2*time.Second, "re-assertion", held)
	}
}

// BenchmarkNodeInformerSync starts the agent's node-scoped informers and waits for their
// first sync, with 0 and with 500 pods on another node: time and bytes received per sync
// stay those of this node's own 10 pods, whatever the rest of the cluster holds.
func BenchmarkNodeInformerSync(b *testing.B) {
	for _, elsewhere := range []int{0, 500} {
		b.Run(fmt.Sprintf("pods-on-other-nodes=%d", elsewhere), func(b *testing.B) {
			n := newTestNode(b)
			for i := range 10 {
				createPod(b, n.namespace, fmt.Sprintf("own-%d", i), n.name, nil, nil)
			}
			if elsewhere > 0 {
				other := newTestNode(b)
				for i := range elsewhere {
					createPod(b, other.namespace, fmt.Sprintf("other-%d", i), other.name, nil, nil)
				}
			}
			var received atomic.Int64
			cfg := rest.CopyConfig(n.agentCfg)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &received} })
			client, err := NewClient(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				inf, err := NewNodeInformers(client, n.name)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				if err := inf.Start(ctx); err != nil {
					b.Fatal(err)
				}
				cancel()
				inf.Shutdown()
			}
			b.ReportMetric(float64(received.Load())/float64(b.N), "bytes-received/op")
		})
	}
}

// countingTransport counts response body bytes.
type countingTransport struct {
	next  http.RoundTripper
	count *atomic.Int64
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = countingBody{resp.Body, c.count}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	count *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.count.Add(int64(n))
	return n, err
}
