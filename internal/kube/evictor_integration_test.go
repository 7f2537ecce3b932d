//go:build integration

package kube

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/eviction"
)

// newTestEvictor builds an Evictor acting as the agent on n, with the rate limits opened
// wide unless the test sets them.
func newTestEvictor(t testing.TB, n *testNode, inf *NodeInformers, mutate func(*EvictorOptions)) *Evictor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stop := NewEventRecorder(ctx, n.agent, EventRecorderOptions{NodeName: n.name, Logger: testLogger(t)})
	t.Cleanup(func() { stop(); cancel() })
	opts := evictorOptions(t, n.name)
	opts.RateLimit = RateLimitOptions{PerMinute: 6000, Burst: 100, CoolDown: time.Nanosecond}
	opts.Logger = testLogger(t)
	if mutate != nil {
		mutate(&opts)
	}
	ev, err := NewEvictor(n.agent, recorder, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func waitForPodInCache(t testing.TB, inf *NodeInformers, pods ...*corev1.Pod) {
	t.Helper()
	waitFor(t, 10*time.Second, "pods in the informer cache", func() (bool, error) {
		for _, p := range pods {
			got, err := inf.Pods.Pods(p.Namespace).Get(p.Name)
			if err != nil || got.UID != p.UID || got.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	})
}

func outcomes(res eviction.Result) []string {
	var out []string
	for _, a := range res.Attempts {
		out = append(out, a.Action+" "+a.Pod.Name+" "+string(a.Outcome))
	}
	return out
}

func TestEvictUnprotectedPodReturnsAtOnceWithTheVictim(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	pod := createPod(t, n.namespace, "victim", n.name, map[string]string{"app": "free"}, nil)
	waitForPodInCache(t, inf, pod)
	// No kubelet confirms the deletion, so the victim stays Terminating: Evict must not
	// wait for it (the policy engine does, without blocking the loop).
	ev := newTestEvictor(t, n, inf, nil)

	res := ev.Evict(context.Background(), []Candidate{candidateFor(pod, false)})
	if res.Outcome != eviction.OutcomeEvicted || res.Victim == nil || res.Victim.Pod.UID != pod.UID {
		t.Fatalf("outcome %s, victim %v, attempts %v, err %v; want evicted %s", res.Outcome, res.Victim, outcomes(res), res.Err, pod.Name)
	}
	got, err := env.Client.CoreV1().Pods(n.namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("pod after eviction: deletionTimestamp %v grace %v; want terminating with grace 30 s", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
	}
	event := waitForEvent(t, n.namespace, "Pod", pod.Name, EventReasonEvicted)
	if event.Type != corev1.EventTypeWarning || !strings.HasPrefix(event.Message, "The node was low on resource: memory.") ||
		event.Annotations["starved_resource"] != "memory" || event.Source.Component != EventComponent || event.Source.Host != n.name {
		t.Fatalf("Evicted event = %+v", event)
	}
}

func TestSoftPressurePDBRefusalMovesToNextCandidate(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	protected := createPod(t, n.namespace, "protected", n.name, map[string]string{"app": "guarded"}, nil)
	free := createPod(t, n.namespace, "free", n.name, map[string]string{"app": "free"}, nil)
	pdbFor(t, n.namespace, "guarded", 1)
	waitForPodInCache(t, inf, protected, free)
	ev := newTestEvictor(t, n, inf, nil)

	res := ev.Evict(context.Background(), []Candidate{candidateFor(protected, false), candidateFor(free, false)})
	want := []string{"evict protected pdb_blocked", "evict free evicted"}
	if got := outcomes(res); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("attempts = %v, want %v", got, want)
	}
	if res.Outcome != eviction.OutcomeEvicted || res.Victim.Pod.Name != "free" {
		t.Fatalf("outcome %s victim %v", res.Outcome, res.Victim)
	}
	got, err := env.Client.CoreV1().Pods(n.namespace).Get(context.Background(), protected.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp != nil {
		t.Fatalf("protected pod after soft pass: %v, deletionTimestamp %v", err, got.DeletionTimestamp)
	}
	// Soft pressure never escalates: no Warning on the node for a soft refusal.
	for _, e := range eventsFor(t, "default", "Node", n.name) {
		if e.Reason == EventReasonEscalatedToDelete || e.Reason == EventReasonEvictionGaveUp {
			t.Errorf("soft pressure produced escalation event %s: %s", e.Reason, e.Message)
		}
	}
}

func TestHardPressureEscalatesInOrder(t *testing.T) {
	for _, tc := range []struct {
		after        EscalationAction
		wantAttempts []string
		wantOutcome  eviction.Outcome
		wantEvents   []string
	}{
		{
			after:        EscalateDelete,
			wantAttempts: []string{"evict a pdb_blocked", "evict b pdb_blocked", "delete a deleted"},
			wantOutcome:  eviction.OutcomeDeleted,
			wantEvents:   []string{EventReasonEvictionBlocked, EventReasonEscalatedToDelete},
		},
		{
			after:        EscalateStop,
			wantAttempts: []string{"evict a pdb_blocked", "evict b pdb_blocked"},
			wantOutcome:  eviction.OutcomePDBBlocked,
			wantEvents:   []string{EventReasonEvictionBlocked, EventReasonEvictionGaveUp},
		},
	} {
		t.Run(string(tc.after), func(t *testing.T) {
			n := newTestNode(t)
			inf := n.startInformers(t, nil)
			labels := map[string]string{"app": "all"}
			a := createPod(t, n.namespace, "a", n.name, labels, nil)
			b := createPod(t, n.namespace, "b", n.name, labels, nil)
			c := createPod(t, n.namespace, "c", n.name, labels, nil)
			pdbFor(t, n.namespace, "all", 3)
			waitForPodInCache(t, inf, a, b, c)
			ev := newTestEvictor(t, n, inf, func(o *EvictorOptions) {
				o.Escalation.MaxCandidates, o.Escalation.AfterBlocked = 2, tc.after
			})

			res := ev.Evict(context.Background(), []Candidate{candidateFor(a, true), candidateFor(b, true), candidateFor(c, true)})
			if got := outcomes(res); strings.Join(got, ";") != strings.Join(tc.wantAttempts, ";") {
				t.Fatalf("attempts = %v, want %v", got, tc.wantAttempts)
			}
			if res.Outcome != tc.wantOutcome {
				t.Fatalf("outcome = %s, want %s (err %v)", res.Outcome, tc.wantOutcome, res.Err)
			}
			for _, reason := range tc.wantEvents {
				waitForEvent(t, "default", "Node", n.name, reason)
			}
			gotA, err := env.Client.CoreV1().Pods(n.namespace).Get(context.Background(), "a", metav1.GetOptions{})
			deleted := apierrors.IsNotFound(err) || (err == nil && gotA.DeletionTimestamp != nil)
			if deleted != (tc.after == EscalateDelete) {
				t.Fatalf("pod a deleted = %v with escalation %s (err %v)", deleted, tc.after, err)
			}
			if tc.after == EscalateDelete {
				event := waitForEvent(t, n.namespace, "Pod", "a", EventReasonEvicted)
				if !strings.Contains(event.Message, "PodDisruptionBudget was overridden") {
					t.Errorf("Evicted event of the deleted pod = %q", event.Message)
				}
			}
			gotC, err := env.Client.CoreV1().Pods(n.namespace).Get(context.Background(), "c", metav1.GetOptions{})
			if err != nil || gotC.DeletionTimestamp != nil {
				t.Fatalf("candidate c beyond Escalation.MaxCandidates was touched: %v %v", err, gotC.DeletionTimestamp)
			}
		})
	}
}

func TestUIDPreconditionSparesRecreatedPodOfSameName(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	old := createPod(t, n.namespace, "reborn", n.name, nil, nil)
	waitForPodInCache(t, inf, old)
	stale := candidateFor(old, true)

	zero := int64(0)
	ctx := context.Background()
	if err := env.Client.CoreV1().Pods(n.namespace).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "old pod gone", func() (bool, error) {
		_, err := env.Client.CoreV1().Pods(n.namespace).Get(ctx, old.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	reborn := createPod(t, n.namespace, "reborn", n.name, nil, nil)
	if reborn.UID == old.UID {
		t.Fatal("re-created pod has the old UID")
	}

	ev := newTestEvictor(t, n, inf, nil)
	res := ev.Evict(ctx, []Candidate{stale})
	if res.Outcome != eviction.OutcomeGone || len(res.Attempts) != 1 || !apierrors.IsConflict(res.Attempts[0].Err) {
		t.Fatalf("outcome %s attempts %v err %v; want gone after a UID precondition conflict", res.Outcome, outcomes(res), res.Err)
	}
	got, err := env.Client.CoreV1().Pods(n.namespace).Get(ctx, "reborn", metav1.GetOptions{})
	if err != nil || got.UID != reborn.UID || got.DeletionTimestamp != nil {
		t.Fatalf("re-created pod after stale eviction: err %v uid %s deletionTimestamp %v", err, got.UID, got.DeletionTimestamp)
	}
}

func TestNotFoundEndsThePass(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	pod := createPod(t, n.namespace, "vanishing", n.name, nil, nil)
	other := createPod(t, n.namespace, "bystander", n.name, nil, nil)
	waitForPodInCache(t, inf, pod, other)
	zero := int64(0)
	if err := env.Client.CoreV1().Pods(n.namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	ev := newTestEvictor(t, n, inf, nil)
	res := ev.Evict(context.Background(), []Candidate{candidateFor(pod, false), candidateFor(other, false)})
	if res.Outcome != eviction.OutcomeGone || len(res.Attempts) != 1 {
		t.Fatalf("outcome %s attempts %v: a vanished candidate must end the pass (its numbers are stale)", res.Outcome, outcomes(res))
	}
}

func TestServerErrorEndsThePass(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	// A pod matched by two PDBs makes the Eviction API answer 500: a real server error.
	doubly := createPod(t, n.namespace, "doubly-protected", n.name, map[string]string{"app": "one", "tier": "two"}, nil)
	other := createPod(t, n.namespace, "bystander", n.name, nil, nil)
	pdbFor(t, n.namespace, "one", 0)
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(n.namespace).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "second"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "two"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPodInCache(t, inf, doubly, other)
	ev := newTestEvictor(t, n, inf, nil)
	res := ev.Evict(context.Background(), []Candidate{candidateFor(doubly, true), candidateFor(other, true)})
	if res.Outcome != eviction.OutcomeAPIError || len(res.Attempts) != 1 || !apierrors.IsInternalError(res.Attempts[0].Err) {
		t.Fatalf("outcome %s attempts %v err %v; want api_error after one 500", res.Outcome, outcomes(res), res.Err)
	}
	if got, err := env.Client.CoreV1().Pods(n.namespace).Get(context.Background(), other.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Fatalf("second candidate touched after a server error: %v", err)
	}
}

func TestRateLimitsHoldBackEvictions(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	var pods []*corev1.Pod
	for _, name := range []string{"p1", "p2", "p3"} {
		pods = append(pods, createPod(t, n.namespace, name, n.name, nil, nil))
	}
	waitForPodInCache(t, inf, pods...)
	finishTerminatingPods(t, n.name)
	ev := newTestEvictor(t, n, inf, func(o *EvictorOptions) {
		o.RateLimit = RateLimitOptions{PerMinute: 0.01, Burst: 2, CoolDown: time.Nanosecond}
	})
	ctx := context.Background()
	for i, want := range []eviction.Outcome{eviction.OutcomeEvicted, eviction.OutcomeEvicted, eviction.OutcomeRateLimited} {
		if res := ev.Evict(ctx, []Candidate{candidateFor(pods[i], false)}); res.Outcome != want {
			t.Fatalf("eviction %d: outcome %s (err %v), want %s", i+1, res.Outcome, res.Err, want)
		}
	}

	cool := newTestEvictor(t, n, inf, func(o *EvictorOptions) {
		o.RateLimit = RateLimitOptions{PerMinute: 6000, Burst: 100, CoolDown: time.Hour}
	})
	p4 := createPod(t, n.namespace, "p4", n.name, nil, nil)
	p5 := createPod(t, n.namespace, "p5", n.name, nil, nil)
	waitForPodInCache(t, inf, p4, p5)
	if res := cool.Evict(ctx, []Candidate{candidateFor(p4, false)}); res.Outcome != eviction.OutcomeEvicted {
		t.Fatalf("first eviction: %s %v", res.Outcome, res.Err)
	}
	if res := cool.Evict(ctx, []Candidate{candidateFor(p5, false)}); res.Outcome != eviction.OutcomeCoolingDown {
		t.Fatalf("eviction within cool-down: %s, want %s", res.Outcome, eviction.OutcomeCoolingDown)
	}

	// Local-storage violations are exempt from the cool-down (the kubelet evicts them all
	// at once; the loop caps them per pass).
	p6 := createPod(t, n.namespace, "p6", n.name, nil, nil)
	p7 := createPod(t, n.namespace, "p7", n.name, nil, nil)
	waitForPodInCache(t, inf, p6, p7)
	local := func(p *corev1.Pod) []Candidate {
		c := candidateFor(p, true)
		c.LocalStorage = true
		return []Candidate{c}
	}
	for _, p := range []*corev1.Pod{p6, p7} {
		if res := cool.Evict(ctx, local(p)); res.Outcome != eviction.OutcomeEvicted {
			t.Fatalf("local-storage eviction of %s within the cool-down: %s %v", p.Name, res.Outcome, res.Err)
		}
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	pod := createPod(t, n.namespace, "spared", n.name, nil, nil)
	waitForPodInCache(t, inf, pod)
	ev := newTestEvictor(t, n, inf, func(o *EvictorOptions) { o.DryRun = true })
	_, _, offset := auditWrites(t, agentUsername, 0)
	res := ev.Evict(context.Background(), []Candidate{candidateFor(pod, true)})
	if res.Outcome != eviction.OutcomeDryRun || res.Victim == nil || res.Victim.Pod.Name != "spared" {
		t.Fatalf("dry run: outcome %s victim %v", res.Outcome, res.Victim)
	}
	time.Sleep(500 * time.Millisecond) // let any (wrong) asynchronous Event reach the audit log
	if count, seen, _ := auditWrites(t, agentUsername, offset); count != 0 {
		t.Fatalf("dry run made %d writes: %v", count, seen)
	}
}

// recordingStopper stands in for the CRI client (owned by the reclaim package) and
// records which pods it was asked to stop, and whether the journal (if
// journal is set) already named each of them when it was asked.
type recordingStopper struct {
	mu        sync.Mutex
	journal   string
	stopped   []types.UID
	journaled []bool
}

func (r *recordingStopper) StopPodSandboxByPodUID(_ context.Context, uid types.UID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = append(r.stopped, uid)
	if r.journal != "" {
		data, _ := os.ReadFile(r.journal)
		r.journaled = append(r.journaled, strings.Contains(string(data), string(uid)))
	}
	return nil
}

func TestAPIServerDownUnderHardPressureStopsLocallyAndReportsLater(t *testing.T) {
	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	pod := createPod(t, n.namespace, "hog", n.name, nil, nil)
	waitForPodInCache(t, inf, pod)
	journal := filepath.Join(t.TempDir(), "local-stops.json")
	stopper := &recordingStopper{journal: journal}
	ev := newTestEvictor(t, n, inf, func(o *EvictorOptions) {
		o.LocalStop = LocalStopOptions{Enabled: true, Stopper: stopper, After: 3 * time.Second, JournalPath: journal}
		o.APITimeout = 2 * time.Second
	})

	env.StopAPIServer()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.StartAPIServer()
		}
	})
	soft := ev.Evict(context.Background(), []Candidate{candidateFor(pod, false)})
	if soft.Outcome != eviction.OutcomeAPIError || len(stopper.stopped) != 0 {
		t.Fatalf("soft pressure with the API down: outcome %s, stopped %v; want api_error and no local stop", soft.Outcome, stopper.stopped)
	}
	// The loop passes every second; the local stop waits for LocalStop.After (3 s) of
	// unreachability, counted from the first failed call.
	downSince := time.Now()
	var hard eviction.Result
	for time.Since(downSince) < 10*time.Second {
		hard = ev.Evict(context.Background(), []Candidate{candidateFor(pod, true)})
		if hard.Outcome == eviction.OutcomeStoppedLocally {
			break
		}
		if hard.Outcome != eviction.OutcomeAPIError {
			t.Fatalf("hard pressure with the API down: outcome %s (err %v)", hard.Outcome, hard.Err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if waited := time.Since(downSince); hard.Outcome != eviction.OutcomeStoppedLocally || waited < 3*time.Second {
		t.Fatalf("local stop: outcome %s after %v; want stopped_locally after at least 3 s", hard.Outcome, waited)
	}
	if len(stopper.stopped) != 1 || stopper.stopped[0] != pod.UID {
		t.Fatalf("stopped through the CRI: %v, want [%s]", stopper.stopped, pod.UID)
	}
	// Write-ahead: a process killed during the CRI call still has the stop
	// to report after its restart.
	if !stopper.journaled[0] {
		t.Errorf("the journal %s did not name the pod when the CRI stop was made; want it written first", journal)
	}
	if reported, err := ev.ReportLocalStops(context.Background()); reported != 0 || err == nil || ev.PendingLocalStops() != 1 {
		t.Fatalf("report while the API is down: reported %d err %v pending %d; want 0, an error, 1 queued", reported, err, ev.PendingLocalStops())
	}

	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	reported, err := ev.ReportLocalStops(context.Background())
	if err != nil || reported != 1 || ev.PendingLocalStops() != 0 {
		t.Fatalf("report after the API is back: reported %d err %v pending %d", reported, err, ev.PendingLocalStops())
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("journal %s after every stop was reported: %v; want it removed", journal, err)
	}
	waitForEvent(t, n.namespace, "Pod", pod.Name, EventReasonStoppedLocally)
	waitForEvent(t, "default", "Node", n.name, EventReasonStoppedLocally)
	got, err := env.Client.CoreV1().Pods(n.namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err == nil && got.DeletionTimestamp == nil {
		t.Fatal("locally stopped pod was not deleted through the API once it was back")
	}
}
