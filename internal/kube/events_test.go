package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// The tests' FakeRecorder stays a recorder the agent's parts take.
var _ EventRecorder = (*record.FakeRecorder)(nil)

// sinkCall is one write the Recorder made.
type sinkCall struct {
	verb  string // create, patch
	event *corev1.Event
	patch []byte
}

// fakeSink stores Events as the API server does, for what the Recorder writes;
// fail, if set, answers a write instead (nil: store it); gate, if set, holds
// every write until it is closed, after signalling entered.
type fakeSink struct {
	mu      sync.Mutex
	calls   []sinkCall
	stored  map[string]*corev1.Event
	fail    func(n int, c sinkCall) error
	entered chan struct{}
	gate    chan struct{}
}

func newFakeSink() *fakeSink { return &fakeSink{stored: map[string]*corev1.Event{}} }

func (s *fakeSink) write(c sinkCall) (*corev1.Event, error) {
	if s.gate != nil {
		s.entered <- struct{}{}
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	if s.fail != nil {
		if err := s.fail(len(s.calls), c); err != nil {
			return nil, err
		}
	}
	key := c.event.Namespace + "/" + c.event.Name
	switch c.verb {
	case "create":
		if _, ok := s.stored[key]; ok {
			return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, c.event.Name)
		}
		e := c.event.DeepCopy()
		e.ResourceVersion = "1"
		s.stored[key] = e
		return e.DeepCopy(), nil
	default:
		e, ok := s.stored[key]
		if !ok {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, c.event.Name)
		}
		if err := json.Unmarshal(c.patch, e); err != nil { // a merge patch of scalars
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return e.DeepCopy(), nil
	}
}

func (s *fakeSink) Create(_ context.Context, e *corev1.Event) (*corev1.Event, error) {
	return s.write(sinkCall{verb: "create", event: e.DeepCopy()})
}

func (s *fakeSink) Patch(_ context.Context, namespace, name string, data []byte) (*corev1.Event, error) {
	return s.write(sinkCall{verb: "patch", event: &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, patch: data})
}

func (s *fakeSink) storedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stored)
}

func (s *fakeSink) written() []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkCall(nil), s.calls...)
}

// drops counts the Recorder's OnDrop calls by reason.
type drops struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *drops) add(reason string) { d.mu.Lock(); d.n[reason]++; d.mu.Unlock() }
func (d *drops) get(reason string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[reason]
}

func startTestRecorder(sink *fakeSink, clk *clocktesting.FakeClock) (*Recorder, *drops, func()) {
	d := &drops{n: map[string]int{}}
	r, stop := startRecorder(context.Background(), sink, EventRecorderOptions{NodeName: "node-a", Clock: clk, OnDrop: d.add,
		RetryInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	return r, d, stop
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

func TestRepeatedEventIsOneCreateThenAMergePatchWithCount2(t *testing.T) {
	sink := newFakeSink()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	r, _, stop := startTestRecorder(sink, clk)
	pod := testPod("web-1")
	r.AnnotatedEventf(pod, map[string]string{"a": "b"}, corev1.EventTypeWarning, EventReasonEvicted, "The node was low on resource: %s.", "memory")
	clk.Step(3 * time.Second)
	r.AnnotatedEventf(pod, map[string]string{"a": "b"}, corev1.EventTypeWarning, EventReasonEvicted, "The node was low on resource: %s.", "memory")
	stop()

	calls := sink.written()
	if len(calls) != 2 || calls[0].verb != "create" || calls[1].verb != "patch" {
		t.Fatalf("writes: %v, want one create then one patch", verbs(calls))
	}
	created := calls[0].event
	wantRef := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "web-1", UID: "uid-web-1"}
	if created.InvolvedObject != wantRef {
		t.Errorf("involvedObject %+v, want %+v", created.InvolvedObject, wantRef)
	}
	if want := (corev1.EventSource{Component: EventComponent, Host: "node-a"}); created.Source != want ||
		created.ReportingController != EventComponent || created.ReportingInstance != "node-a" {
		t.Errorf("source %+v, reporting %q/%q; want %+v and the same reporting controller/instance", created.Source,
			created.ReportingController, created.ReportingInstance, want)
	}
	if created.Namespace != "ns" || created.Count != 1 || created.Reason != EventReasonEvicted || created.Type != corev1.EventTypeWarning ||
		created.Message != "The node was low on resource: memory." || created.Annotations["a"] != "b" {
		t.Errorf("created Event %+v", created)
	}
	if calls[1].event.Name != created.Name || calls[1].event.Namespace != "ns" {
		t.Errorf("patched %s/%s, want the created %s/ns", calls[1].event.Name, calls[1].event.Namespace, created.Name)
	}
	var patch map[string]any
	if err := json.Unmarshal(calls[1].patch, &patch); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"count": 2.0, "lastTimestamp": "2026-11-26T10:00:03Z", "message": "The node was low on resource: memory."}
	if fmt.Sprint(patch) != fmt.Sprint(want) {
		t.Errorf("merge patch %s, want %v", calls[1].patch, want)
	}
	got := sink.stored["ns/"+created.Name]
	if got.Count != 2 || !got.FirstTimestamp.Equal(&created.FirstTimestamp) || got.LastTimestamp.Time.Sub(got.FirstTimestamp.Time) != 3*time.Second {
		t.Errorf("stored Event: count %d, first %v, last %v; want 2, the first's, 3 s later", got.Count, got.FirstTimestamp, got.LastTimestamp)
	}
}

func verbs(calls []sinkCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.verb)
	}
	return out
}

func TestEventsOnTheNodeGoToTheDefaultNamespace(t *testing.T) {
	sink := newFakeSink()
	r, _, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1, 0)))
	r.Event(NodeRef("node-a"), corev1.EventTypeNormal, "NodeReclaim", "freed")
	stop()
	calls := sink.written()
	if len(calls) != 1 || calls[0].event.Namespace != metav1.NamespaceDefault || calls[0].event.InvolvedObject != *NodeRef("node-a") {
		t.Fatalf("writes %+v, want one create in default naming the node", calls)
	}
}

func TestSpamFilterLets25EventsAboutAnObjectThenOneEvery5Minutes(t *testing.T) {
	sink := newFakeSink()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r, d, stop := startTestRecorder(sink, clk)
	pod := testPod("noisy")
	for i := range 30 { // distinct reasons: no repeat, no aggregation
		r.Eventf(pod, corev1.EventTypeWarning, fmt.Sprintf("Reason%d", i), "m")
	}
	r.Event(testPod("quiet"), corev1.EventTypeWarning, "Reason0", "m") // another object has its own bucket
	waitUntil(t, func() bool { return len(sink.written())+d.get(EventDropSpam) == 31 }, "31 Events handled")
	if n := len(sink.written()); n != 26 || d.get(EventDropSpam) != 5 {
		t.Fatalf("%d written, %d dropped as spam; want 26 and 5", n, d.get(EventDropSpam))
	}
	clk.Step(5 * time.Minute)
	r.Event(pod, corev1.EventTypeWarning, "Later", "m")
	r.Event(pod, corev1.EventTypeWarning, "Later2", "m")
	stop()
	if n := len(sink.written()); n != 27 || d.get(EventDropSpam) != 6 {
		t.Fatalf("after 5 minutes: %d written, %d dropped; want one more written, one more dropped", n, d.get(EventDropSpam))
	}
}

func TestSimilarEventsOfAnObjectAreCombinedAfterTenMessages(t *testing.T) {
	sink := newFakeSink()
	r, _, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	pod := testPod("web-1")
	for i := range 11 {
		r.Eventf(pod, corev1.EventTypeWarning, "BackOff", "try %d", i)
	}
	stop()
	calls := sink.written()
	if len(calls) != 11 {
		t.Fatalf("writes %v, want 11", verbs(calls))
	}
	tenth, eleventh := calls[9], calls[10]
	if tenth.verb != "create" || tenth.event.Message != "(combined from similar events): try 9" {
		t.Errorf("10th write: %s %q, want the combined Event created", tenth.verb, tenth.event.Message)
	}
	if eleventh.verb != "patch" || eleventh.event.Name != tenth.event.Name || !strings.Contains(string(eleventh.patch), `"count":2`) ||
		!strings.Contains(string(eleventh.patch), "(combined from similar events): try 10") {
		t.Errorf("11th write: %s %s %s, want the combined Event patched to count 2", eleventh.verb, eleventh.event.Name, eleventh.patch)
	}
}

func TestAFullQueueDropsEventsWithoutBlocking(t *testing.T) {
	sink := newFakeSink()
	sink.entered, sink.gate = make(chan struct{}, 1), make(chan struct{})
	r, d, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	r.Event(testPod("first"), corev1.EventTypeNormal, "R", "m")
	<-sink.entered // the writer holds the first; the queue is empty
	returned := make(chan struct{})
	go func() {
		for i := range EventQueueSize + 5 {
			r.Event(testPod(fmt.Sprintf("p-%d", i)), corev1.EventTypeNormal, "R", "m")
		}
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Event blocked while the writer was stuck")
	}
	if got := d.get(EventDropQueueFull); got != 5 {
		t.Errorf("%d dropped as queue_full, want 5", got)
	}
	sink.entered = make(chan struct{}, EventQueueSize+1)
	close(sink.gate)
	stop()
	if n := len(sink.written()); n != EventQueueSize+1 {
		t.Errorf("%d written after the writer was freed, want the %d queued", n, EventQueueSize+1)
	}
}

func TestStopFlushesQueuedEventsAndDropsLaterOnes(t *testing.T) {
	sink := newFakeSink()
	sink.entered, sink.gate = make(chan struct{}, 10), make(chan struct{})
	r, d, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	for i := range 5 {
		r.Event(testPod(fmt.Sprintf("p-%d", i)), corev1.EventTypeNormal, "R", "m")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	waitUntil(t, func() bool { return r.isClosed() }, "the recorder closed")
	r.Event(testPod("late"), corev1.EventTypeNormal, "R", "m")
	close(sink.gate)
	<-stopped
	if n := len(sink.written()); n != 5 {
		t.Errorf("%d written by the flush, want the 5 queued", n)
	}
	if d.get(EventDropShutdown) != 1 {
		t.Errorf("the Event recorded after stop: %d dropped as shutdown, want 1", d.get(EventDropShutdown))
	}
}

func TestStopOnCancelledContextStillFlushes(t *testing.T) {
	sink := newFakeSink()
	ctx, cancel := context.WithCancel(context.Background())
	r, stop := startRecorder(ctx, sink, EventRecorderOptions{NodeName: "n", Logger: slog.New(slog.DiscardHandler)})
	r.Event(testPod("a"), corev1.EventTypeNormal, "R", "m")
	cancel() // the daemon's Close cancels before its cleanups run
	stop()
	if n := len(sink.written()); n != 1 {
		t.Errorf("%d written, want the Event queued before the cancel", n)
	}
}

func TestWritesAreRetriedOnTransientErrorsOnly(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		failures   int
		wantWrites int
		wantStored bool
	}{
		{"connection refused, twice", errors.New("dial tcp: connection refused"), 2, 3, true},
		{"503 from a restarting API server", apierrors.NewServiceUnavailable("starting"), 1, 2, true},
		{"forbidden: not retried", apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "x", errors.New("rbac")), 100, 1, false},
		{"unreachable for good: 12 tries", errors.New("dial tcp: i/o timeout"), 100, eventMaxTries, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newFakeSink()
			sink.fail = func(n int, _ sinkCall) error {
				if n <= tc.failures {
					return tc.err
				}
				return nil
			}
			r, d, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1000, 0)))
			r.Event(testPod("a"), corev1.EventTypeNormal, "R", "m")
			waitUntil(t, func() bool { return sink.storedCount() == 1 || d.get(EventDropWriteFailed) == 1 }, "the Event written or given up")
			stop()
			if n := len(sink.written()); n != tc.wantWrites || (sink.storedCount() == 1) != tc.wantStored {
				t.Errorf("%d writes, stored %v; want %d, %v", n, sink.storedCount() == 1, tc.wantWrites, tc.wantStored)
			}
		})
	}
}

func TestARepeatOfADeletedEventIsCreatedAgain(t *testing.T) {
	sink := newFakeSink()
	r, _, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	pod := testPod("a")
	r.Event(pod, corev1.EventTypeNormal, "R", "m")
	waitUntil(t, func() bool { return len(sink.written()) == 1 }, "the first Event written")
	sink.mu.Lock()
	clear(sink.stored) // the Event's TTL ran out
	sink.mu.Unlock()
	r.Event(pod, corev1.EventTypeNormal, "R", "m")
	stop()
	calls := sink.written()
	if len(calls) != 3 || calls[1].verb != "patch" || calls[2].verb != "create" || calls[2].event.Count != 2 || calls[2].event.ResourceVersion != "" {
		t.Fatalf("writes %v (last %+v), want create, patch (not found), create with count 2", verbs(calls), calls[len(calls)-1].event)
	}
}

func TestInvalidEventsAreDroppedAndCounted(t *testing.T) {
	sink := newFakeSink()
	r, d, stop := startTestRecorder(sink, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	r.Event(testPod("a"), "Error", "R", "m")
	r.Event(nil, corev1.EventTypeNormal, "R", "m")
	stop()
	if n := len(sink.written()); n != 0 || d.get(EventDropInvalid) != 2 {
		t.Errorf("%d written, %d invalid; want 0 and 2", n, d.get(EventDropInvalid))
	}
}

func TestEventNamesAreValidForLongObjectNames(t *testing.T) {
	at := metav1.NewTime(time.Unix(0, 0x187654321abcdef0))
	if got := eventName("web-1", at); got != "web-1.187654321abcdef0" {
		t.Errorf("eventName = %q, want record's <object>.<unix nanoseconds in hex>", got)
	}
	long := strings.Repeat("a", 240) + "." + strings.Repeat("b", 12)
	for _, object := range []string{long, strings.Repeat("a", 236) + ".-" + strings.Repeat("b", 15)} {
		got := eventName(object, at)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || !strings.HasSuffix(got, ".187654321abcdef0") {
			t.Errorf("eventName(%d characters) = %q: %v", len(object), got, errs)
		}
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestBinaryDoesNotLinkClientGoEventRecorder keeps client-go's tools/record out of
// cmd/evictiond, and with it its strategic merge patch and, through that,
// kube-openapi's OpenAPI models, gnostic and structured-merge-diff's typed values
// (docs/scale.md, "What is left of the memory"). The Recorder above does its work
// with a JSON merge patch.
func TestBinaryDoesNotLinkClientGoEventRecorder(t *testing.T) {
	var recorder bool
	for _, pkg := range agentLinks(t) {
		if within(pkg, "k8s.io/client-go/tools/record", "k8s.io/apimachinery/pkg/util/strategicpatch",
			"k8s.io/kube-openapi/pkg/util/proto", "github.com/google/gnostic-models", "sigs.k8s.io/structured-merge-diff/v6/typed") {
			t.Errorf("cmd/evictiond links %s: record Events through kube.EventRecorder (NewEventRecorder)", pkg)
		}
		recorder = recorder || pkg == "k8s.io/client-go/tools/reference"
	}
	if !recorder {
		t.Errorf("go list found no k8s.io/client-go/tools/reference (the Recorder's) in cmd/evictiond's dependencies")
	}
}
