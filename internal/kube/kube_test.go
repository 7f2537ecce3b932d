package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

func TestClassifyTellsPDBRefusalFromThrottling(t *testing.T) {
	pdb := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	pdb.ErrStatus.Details.Causes = append(pdb.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause})
	for _, tc := range []struct {
		name string
		err  error
		want eviction.Outcome
	}{
		{"accepted", nil, eviction.OutcomeEvicted},
		{"pdb", pdb, eviction.OutcomePDBBlocked},
		{"wrapped pdb", fmt.Errorf("evicting: %w", pdb), eviction.OutcomePDBBlocked},
		{"apf throttling", apierrors.NewTooManyRequests("slow down", 1), eviction.OutcomeThrottled},
		{"not found", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"), eviction.OutcomeGone},
		{"uid precondition", apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("precondition failed")), eviction.OutcomeGone},
		{"server error", apierrors.NewInternalError(errors.New("boom")), eviction.OutcomeAPIError},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("no")), eviction.OutcomeAPIError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

func TestIsUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("post: %w", context.DeadlineExceeded), true},
		{apierrors.NewInternalError(errors.New("boom")), false},
		{apierrors.NewTooManyRequests("x", 1), false},
		{nil, false},
	} {
		if got := isUnreachable(tc.err); got != tc.want {
			t.Errorf("isUnreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// evictorOptions are the options the daemon builds from the default configuration.
func evictorOptions(t testing.TB, nodeName string) EvictorOptions {
	t.Helper()
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	opts := EvictorOptionsFromConfig(cfg)
	opts.NodeName, opts.Clock, opts.Logger = nodeName, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.APIReachable = func() bool { return true }
	return opts
}

func TestEvictorOptionsFromTheDefaultConfigAndValidation(t *testing.T) {
	opts := evictorOptions(t, "n")
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	if opts.Escalation.MaxCandidates != 3 || opts.Escalation.AfterBlocked != EscalateDelete || opts.Escalation.SoftMaxCandidates != 5 ||
		opts.RateLimit.PerMinute != 10 || opts.RateLimit.Burst != 3 || opts.RateLimit.CoolDown != time.Second ||
		opts.LocalStop.After != 10*time.Second || opts.APITimeout != DefaultAPITimeout {
		t.Fatalf("options from the default configuration = %+v", opts)
	}
	for _, tc := range []struct {
		mutate  func(*EvictorOptions)
		wantErr string
	}{
		{func(o *EvictorOptions) { o.NodeName = "" }, "NodeName"},
		{func(o *EvictorOptions) { o.Escalation.AfterBlocked = "Drain" }, `Escalation.AfterBlocked: value "Drain"`},
		{func(o *EvictorOptions) { o.Escalation.MaxCandidates = 0 }, "Escalation.MaxCandidates: value 0: must be at least 1"},
		{func(o *EvictorOptions) { o.RateLimit.PerMinute = 0 }, "RateLimit.PerMinute: value 0: must be positive"},
		{func(o *EvictorOptions) { o.RateLimit.CoolDown = -time.Second }, "RateLimit.CoolDown: value -1s"},
		{func(o *EvictorOptions) { o.LocalStop.Enabled = true }, "LocalStop.Stopper"},
		{func(o *EvictorOptions) { o.APIReachable = nil }, "APIReachable"},
	} {
		o := evictorOptions(t, "n")
		tc.mutate(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("validate() = %v, want error containing %q", err, tc.wantErr)
		}
	}
}

func TestNodeStatusOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		effects map[corev1.NodeConditionType]corev1.TaintEffect
		wantErr string
	}{
		{map[corev1.NodeConditionType]corev1.TaintEffect{corev1.NodeMemoryPressure: corev1.TaintEffectNoExecute}, `TaintEffects[MemoryPressure]: value "NoExecute"`},
		{map[corev1.NodeConditionType]corev1.TaintEffect{corev1.NodeReady: corev1.TaintEffectNoSchedule}, "TaintEffects[Ready]: not a pressure condition"},
		{map[corev1.NodeConditionType]corev1.TaintEffect{corev1.NodeMemoryPressure: corev1.TaintEffectNoSchedule}, ""},
	} {
		o := NodeStatusOptions{NodeName: "n", TaintEffects: tc.effects}
		o.setDefaults()
		err := o.validate()
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("validate(%v) = %v, want %q", tc.effects, err, tc.wantErr)
		}
	}
}

func newStatusForTest(t *testing.T, mode ConditionsMode, effects map[corev1.NodeConditionType]corev1.TaintEffect) *NodeStatus {
	t.Helper()
	opts := NodeStatusOptions{NodeName: "n", Conditions: mode, TaintEffects: effects}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	return &NodeStatus{opts: opts, held: map[corev1.NodeConditionType]bool{}}
}

func TestConditionChangesTouchOnlyOwnedEntries(t *testing.T) {
	kubeletFalse := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"}
	kubeletTrue := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "KubeletHasInsufficientMemory"}
	stdOursTrue := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: ReasonMemoryPressure}
	ownTrue := corev1.NodeCondition{Type: ConditionMemoryPressure, Status: corev1.ConditionTrue, Reason: ReasonMemoryPressure}
	ownFalse := corev1.NodeCondition{Type: ConditionMemoryPressure, Status: corev1.ConditionFalse, Reason: ReasonNoMemoryPressure}
	const (
		stdSet     = "MemoryPressure=True/EvictiondMemoryPressure"
		stdRelease = "MemoryPressure=False/EvictiondNoMemoryPressure"
		ownSet     = "EvictiondMemoryPressure=True/EvictiondMemoryPressure"
		ownRelease = "EvictiondMemoryPressure=False/EvictiondNoMemoryPressure"
	)
	for _, tc := range []struct {
		name    string
		mode    ConditionsMode
		node    []corev1.NodeCondition
		desired bool
		want    []string
	}{
		{"standard: quiet, kubelet entry", ConditionsStandard, []corev1.NodeCondition{kubeletFalse}, false, nil},
		{"standard: quiet, no entry", ConditionsStandard, nil, false, nil},
		{"standard: pressure starts", ConditionsStandard, []corev1.NodeCondition{kubeletFalse}, true, []string{stdSet}},
		{"standard: pressure holds, ours", ConditionsStandard, []corev1.NodeCondition{stdOursTrue}, true, nil},
		{"standard: pressure holds, kubelet flipped it", ConditionsStandard, []corev1.NodeCondition{kubeletFalse}, true, []string{stdSet}},
		{"standard: released, ours True", ConditionsStandard, []corev1.NodeCondition{stdOursTrue}, false, []string{stdRelease}},
		{"standard: released, kubelet already wrote False", ConditionsStandard, []corev1.NodeCondition{kubeletFalse}, false, nil},
		{"standard: released, the kubelet's own True stays", ConditionsStandard, []corev1.NodeCondition{kubeletTrue}, false, nil},
		{"own: quiet, nothing written", ConditionsOwn, []corev1.NodeCondition{kubeletFalse}, false, nil},
		{"own: pressure starts, the kubelet's entry untouched", ConditionsOwn, []corev1.NodeCondition{kubeletFalse}, true, []string{ownSet}},
		{"own: pressure starts after an earlier episode", ConditionsOwn, []corev1.NodeCondition{kubeletFalse, ownFalse}, true, []string{ownSet}},
		{"own: pressure holds, the kubelet's rewrite is not a change", ConditionsOwn, []corev1.NodeCondition{kubeletFalse, ownTrue}, true, nil},
		{"own: released", ConditionsOwn, []corev1.NodeCondition{kubeletFalse, ownTrue}, false, []string{ownRelease}},
		{"own: released once", ConditionsOwn, []corev1.NodeCondition{kubeletFalse, ownFalse}, false, nil},
		{"own: the old design's standard entry is released", ConditionsOwn, []corev1.NodeCondition{stdOursTrue}, true, []string{stdRelease, ownSet}},
		{"own: the kubelet's own True is not ours", ConditionsOwn, []corev1.NodeCondition{kubeletTrue}, false, nil},
		{"both: pressure starts", ConditionsBoth, []corev1.NodeCondition{kubeletFalse}, true, []string{stdSet, ownSet}},
		{"both: kubelet flipped the standard entry", ConditionsBoth, []corev1.NodeCondition{kubeletFalse, ownTrue}, true, []string{stdSet}},
		{"both: released", ConditionsBoth, []corev1.NodeCondition{stdOursTrue, ownTrue}, false, []string{stdRelease, ownRelease}},
		{"none: pressure writes no condition", ConditionsNone, []corev1.NodeCondition{kubeletFalse}, true, nil},
		{"none: leftovers released", ConditionsNone, []corev1.NodeCondition{stdOursTrue, ownTrue}, true, []string{stdRelease, ownRelease}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatusForTest(t, tc.mode, nil)
			node := &corev1.Node{Status: corev1.NodeStatus{Conditions: tc.node}}
			changes, _ := s.conditionChanges(node, map[corev1.NodeConditionType]bool{corev1.NodeMemoryPressure: tc.desired}, nil)
			if got := describeConditions(changes); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("changes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPressureEventsOncePerTransition(t *testing.T) {
	s := newStatusForTest(t, ConditionsBoth, nil)
	pressure := map[corev1.NodeConditionType]bool{corev1.NodeMemoryPressure: true}
	_, events := s.conditionChanges(&corev1.Node{}, pressure, nil)
	if len(events) != 1 || events[0].reason != EventReasonPressureCondition ||
		events[0].message != "Node condition MemoryPressure, EvictiondMemoryPressure set True by evictiond" {
		t.Fatalf("onset events = %+v, want one naming both types", events)
	}
	s.commitHeld(pressure)
	// The kubelet flips the standard entry: re-asserted without a new Event.
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: ConditionMemoryPressure, Status: corev1.ConditionTrue, Reason: ReasonMemoryPressure}}}}
	if changes, events := s.conditionChanges(node, pressure, nil); len(changes) != 1 || len(events) != 0 {
		t.Fatalf("re-assert: changes %v events %+v, want one change and no Event", describeConditions(changes), events)
	}
}

// The condition and its Event name the signals met (swap.available for a swap-full node);
// a change of signals during the episode rewrites the message without a new Event, and
// the transition period (no signal met) keeps it.
func TestPressureConditionNamesItsSignals(t *testing.T) {
	s := newStatusForTest(t, ConditionsOwn, nil)
	pressure := map[corev1.NodeConditionType]bool{corev1.NodeMemoryPressure: true}
	swap := map[corev1.NodeConditionType][]string{corev1.NodeMemoryPressure: {"swap.available"}}
	changes, events := s.conditionChanges(&corev1.Node{}, pressure, swap)
	if len(changes) != 1 || changes[0].Message != "evictiond: node has insufficient memory available (swap.available)" {
		t.Fatalf("onset: changes %+v", changes)
	}
	if len(events) != 1 || events[0].message != "Node condition EvictiondMemoryPressure set True by evictiond: swap.available" {
		t.Fatalf("onset events %+v", events)
	}
	s.commitHeld(pressure)
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: changes}}
	both := map[corev1.NodeConditionType][]string{corev1.NodeMemoryPressure: {"memory.available", "swap.available"}}
	changes, events = s.conditionChanges(node, pressure, both)
	if len(changes) != 1 || changes[0].Message != "evictiond: node has insufficient memory available (memory.available, swap.available)" || len(events) != 0 {
		t.Fatalf("signals changed: changes %+v events %+v, want the message rewritten and no Event", changes, events)
	}
	node.Status.Conditions = changes
	if changes, events = s.conditionChanges(node, pressure, nil); len(changes) != 0 || len(events) != 0 {
		t.Fatalf("transition period: changes %+v events %+v, want the message kept", changes, events)
	}
}

func TestDefaultTaintsProtectAtLeastAsTheStandardOnes(t *testing.T) {
	// Every default is NoSchedule: the standard pressure taints the node lifecycle
	// controller derives from the conditions are NoSchedule, and evictiond's replace them
	// as the protection that never lapses.
	for cond, effect := range DefaultTaintEffects() {
		if effect != corev1.TaintEffectNoSchedule {
			t.Errorf("default effect for %s = %s, want NoSchedule", cond, effect)
		}
	}
}

func TestWantedTaintsKeepForeignTaintsAndHonourEffects(t *testing.T) {
	s := newStatusForTest(t, "", map[corev1.NodeConditionType]corev1.TaintEffect{corev1.NodeDiskPressure: ""})
	foreign := corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{foreign, {Key: TaintKeyPIDPressure, Effect: corev1.TaintEffectPreferNoSchedule}}}}

	taints, changed := s.wantedTaints(node, map[corev1.NodeConditionType]bool{
		corev1.NodeMemoryPressure: true, corev1.NodeDiskPressure: true, corev1.NodePIDPressure: true,
	})
	want := []corev1.Taint{foreign,
		{Key: TaintKeyMemoryPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintKeyPIDPressure, Effect: corev1.TaintEffectNoSchedule}}
	if !changed || !slices.Equal(taints, want) {
		t.Fatalf("taints = %v changed %v, want %v (disk taint disabled, pid effect corrected)", taints, changed, want)
	}
	node.Spec.Taints = taints
	if _, changed := s.wantedTaints(node, map[corev1.NodeConditionType]bool{
		corev1.NodeMemoryPressure: true, corev1.NodeDiskPressure: true, corev1.NodePIDPressure: true,
	}); changed {
		t.Fatal("no change wanted once the taints match")
	}
}

func TestNewerResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"10", "9", true}, {"9", "10", false}, {"10", "10", false}, {"x", "1", false}, {"", "1", false}} {
		if got := newerResourceVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("newerResourceVersion(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestLocalStopJournalSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local-stops.json")
	opts := evictorOptions(t, "n")
	opts.LocalStop.JournalPath = path
	ev, err := NewEvictor(nil, record.NewFakeRecorder(10), opts)
	if err != nil {
		t.Fatal(err)
	}
	if ev.PendingLocalStops() != 0 {
		t.Fatal("fresh evictor without a journal file has pending stops")
	}
	at := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hog", UID: "uid-1"}}
	stops := []localStop{{at: at, candidate: Candidate{Pod: pod, Signal: policy.SignalMemoryAvailable, Hard: true,
		GracePeriodSeconds: 1, Message: "The node was low on resource: memory. ", Annotations: map[string]string{"starved_resource": "memory"}}}}
	if err := saveLocalStops(path, stops); err != nil {
		t.Fatal(err)
	}

	restarted, err := NewEvictor(nil, record.NewFakeRecorder(10), opts)
	if err != nil {
		t.Fatal(err)
	}
	if restarted.PendingLocalStops() != 1 {
		t.Fatalf("pending after restart = %d, want 1", restarted.PendingLocalStops())
	}
	got := restarted.localStops[0]
	if got.candidate.Pod.UID != "uid-1" || got.candidate.Pod.Name != "hog" || !got.at.Equal(at) ||
		got.candidate.Annotations["starved_resource"] != "memory" || got.candidate.Signal != policy.SignalMemoryAvailable {
		t.Fatalf("reloaded stop = %+v", got)
	}

	if err := saveLocalStops(path, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("journal with no stops still exists: %v", err)
	}

	// A corrupt journal no longer stops the start: TestLocalStopJournalCrashPoints.
}
