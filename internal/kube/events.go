package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
)

// Event reasons evictiond records besides the kubelet's "Evicted".
const (
	EventReasonEvicted           = "Evicted"
	EventReasonEvictionBlocked   = "EvictionBlockedByPDB"
	EventReasonEscalatedToDelete = "EvictionEscalatedToDelete"
	EventReasonEvictionGaveUp    = "EvictionGaveUp"
	EventReasonStoppedLocally    = "PodStoppedLocally"
	EventReasonLocalStopFailed   = "PodLocalStopFailed"
	EventReasonPressureCondition = "EvictiondPressure"
	EventReasonPressureReleased  = "EvictiondNoPressure"
	EventReasonStaleStateRemoved = "EvictiondStaleStateRemoved"
	// EventReasonLocalStopJournalCorrupt: the local-stop journal could not be
	// trusted at start and was moved aside (or could not be read).
	EventReasonLocalStopJournalCorrupt = "LocalStopJournalCorrupt"
)

// EventRecorder records Events about an object (a Pod, or an ObjectReference such as
// NodeRef's). It is client-go's record.EventRecorder method for method, so the tests'
// record.FakeRecorder is one; the binary links only NewEventRecorder's (tools/record
// brings the strategic merge patch and, through it, the OpenAPI machinery).
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

// NodeRef is the object reference for Events on the node (threshold met, reclaim,
// conditions), as the kubelet makes it: the node's name as its UID, so Events stay
// attached across node re-registration. Use it with the recorder of NewEventRecorder.
func NodeRef(nodeName string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
}

// Reasons an Event is not written (EventRecorderOptions.OnDrop; the metric
// evictiond_events_dropped_total's reason label).
const (
	EventDropQueueFull   = "queue_full"   // more than EventQueueSize Events waiting
	EventDropSpam        = "spam"         // the object's token bucket is empty
	EventDropWriteFailed = "write_failed" // rejected, or the retries ran out
	EventDropInvalid     = "invalid"      // no reference to the object, or a bad type
	EventDropShutdown    = "shutdown"     // still queued when the flush ran out of time
)

// EventDropReasons are the EventDrop* reasons, for a metric to show each from the start.
var EventDropReasons = []string{EventDropQueueFull, EventDropSpam, EventDropWriteFailed, EventDropInvalid, EventDropShutdown}

// The recorder's bounds, client-go's record package's unless said.
const (
	// EventQueueSize Events wait at most; more are dropped, never waited for.
	EventQueueSize = 1000
	// eventMaxTries writes of one Event, eventRetryInterval apart (the first
	// wait randomized so that nodes do not retry in step after an outage).
	eventMaxTries      = 12
	eventRetryInterval = 10 * time.Second
	// eventWriteTimeout bounds one write (record has none: a hung connection
	// would hold every Event behind it).
	eventWriteTimeout = 10 * time.Second
	// eventFlushTimeout bounds the flush at shutdown: each queued Event is
	// tried once, without waiting between tries, as record does once shut down.
	eventFlushTimeout = 3 * time.Second
)

// EventRecorderOptions configure NewEventRecorder; NodeName is required.
type EventRecorderOptions struct {
	// NodeName is the Events' source host and reporting instance.
	NodeName string
	// Logger gets writes given up and queue overflows; nil: slog.Default().
	Logger *slog.Logger
	// OnDrop, if set, is called (from any goroutine) for each Event not
	// written, with an EventDrop* reason.
	OnDrop func(reason string)
	// Clock stamps the Events and drives the spam filter and aggregation;
	// nil: the real clock. Tests set it and RetryInterval.
	Clock         clock.PassiveClock
	RetryInterval time.Duration
}

// Recorder writes Events to the API server as client-go's record package does,
// without its strategic merge patch: Event calls never block (a bounded queue, one
// writer goroutine), repeats of an Event become one Event with a count (a JSON merge
// patch of count, lastTimestamp and message: core/v1 Event's fields are scalars),
// similar Events of one object are combined, each object's Events go through a
// token bucket, and writes are retried while the API server is unreachable.
type Recorder struct {
	sink   eventSink
	source corev1.EventSource
	opts   EventRecorderOptions
	log    *slog.Logger
	clock  clock.PassiveClock

	mu       sync.RWMutex // held for reading to queue, for writing to close
	closed   bool
	queue    chan *corev1.Event
	overflow atomic.Int64 // Events dropped since the queue last took one
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// eventSink is where the Recorder writes: the API server's core/v1 Events.
type eventSink interface {
	Create(ctx context.Context, e *corev1.Event) (*corev1.Event, error)
	Patch(ctx context.Context, namespace, name string, mergePatch []byte) (*corev1.Event, error)
}

type clientEventSink struct{ core CoreV1Interface }

func (s clientEventSink) Create(ctx context.Context, e *corev1.Event) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
}

func (s clientEventSink) Patch(ctx context.Context, namespace, name string, data []byte) (*corev1.Event, error) {
	return s.core.Events(namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
}

// NewEventRecorder returns a recorder whose Events name evictiond on opts.NodeName as
// their source, like the kubelet's do, and a function that flushes and stops it (each
// queued Event tried once, for at most 3 s: the pod has 10 s to exit). The recorder
// also stops when ctx ends; the function must still be called to wait for the flush.
func NewEventRecorder(ctx context.Context, client Interface, opts EventRecorderOptions) (*Recorder, func()) {
	return startRecorder(ctx, clientEventSink{client.CoreV1()}, opts)
}

func startRecorder(ctx context.Context, sink eventSink, opts EventRecorderOptions) (*Recorder, func()) {
	r := newRecorder(sink, opts)
	go r.run()
	stopOnCancel := context.AfterFunc(ctx, r.close)
	return r, func() { stopOnCancel(); r.close(); <-r.done }
}

func newRecorder(sink eventSink, opts EventRecorderOptions) *Recorder {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = eventRetryInterval
	}
	return &Recorder{
		sink:   sink,
		source: corev1.EventSource{Component: EventComponent, Host: opts.NodeName},
		opts:   opts,
		log:    opts.Logger,
		clock:  opts.Clock,
		queue:  make(chan *corev1.Event, EventQueueSize),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// Event queues an Event about object; it never blocks.
func (r *Recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.generate(object, nil, eventtype, reason, message)
}

// Eventf is Event with a formatted message.
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.generate(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (r *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.generate(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *Recorder) generate(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference.GetReference(Scheme, object)
	if err != nil {
		r.log.Error("Event not recorded: no reference to its object", "reason", reason, "message", message, "err", err)
		r.dropped(EventDropInvalid)
		return
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		r.log.Error("Event not recorded: type must be Normal or Warning", "type", eventtype, "reason", reason)
		r.dropped(EventDropInvalid)
		return
	}
	now := metav1.NewTime(r.clock.Now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	e := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, now), Namespace: ns, Annotations: annotations},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}

	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.log.Warn("Event not recorded: the recorder is stopped", "object", ref.Name, "reason", reason, "message", message)
		r.dropped(EventDropShutdown)
		return
	}
	select {
	case r.queue <- e:
		if n := r.overflow.Swap(0); n > 0 {
			r.log.Warn("Event queue has room again", "dropped", n)
		}
	default:
		if r.overflow.Add(1) == 1 {
			r.log.Error("Event queue full: dropping Events until it drains", "size", EventQueueSize, "object", ref.Name, "reason", reason)
		}
		r.dropped(EventDropQueueFull)
	}
}

// eventName is record's: the object's name and the time in hex, shortened if the
// two are not a valid name together (a 253-character pod name).
func eventName(object string, t metav1.Time) string {
	suffix := fmt.Sprintf(".%x", t.UnixNano())
	name := object + suffix
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	prefix := strings.TrimRight(object[:min(len(object), validation.DNS1123SubdomainMaxLength-len(suffix))], ".-")
	if name = prefix + suffix; prefix != "" && len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return EventComponent + suffix
}

func (r *Recorder) dropped(reason string) {
	if r.opts.OnDrop != nil {
		r.opts.OnDrop(reason)
	}
}

// close stops taking Events and tells the writer to flush; it may be called
// more than once.
func (r *Recorder) close() {
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		close(r.queue)
		r.mu.Unlock()
		close(r.stop)
	})
}

// run is the writer: it correlates and writes the queued Events one at a time
// and, once closed, flushes what is left within eventFlushTimeout.
func (r *Recorder) run() {
	defer close(r.done)
	c := newEventCorrelator(r.clock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(eventFlushTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	}()
	for e := range r.queue {
		if ctx.Err() != nil {
			r.log.Warn("Event not recorded: the flush at shutdown ran out of time", "object", e.InvolvedObject.Name, "reason", e.Reason, "message", e.Message)
			r.dropped(EventDropShutdown)
			continue
		}
		r.write(ctx, c, e)
	}
}

// write correlates e and writes it, retrying transient errors eventMaxTries
// times; once the recorder is closed, it tries once.
func (r *Recorder) write(ctx context.Context, c *eventCorrelator, e *corev1.Event) {
	out, key, patch, skip := c.correlate(e)
	if skip {
		r.log.Debug("Event not recorded: too many about its object", "object", e.InvolvedObject.Name, "reason", e.Reason, "message", e.Message)
		r.dropped(EventDropSpam)
		return
	}
	for try := 1; ; try++ {
		written, err := r.writeOnce(ctx, out, patch)
		if err == nil {
			c.written(key, written)
			return
		}
		if !retriable(err) {
			lvl := slog.LevelError
			if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				lvl = slog.LevelDebug
			}
			r.log.Log(ctx, lvl, "Event not recorded: the API server rejected it", "object", out.InvolvedObject.Name, "reason", out.Reason, "message", out.Message, "err", err)
			r.dropped(EventDropWriteFailed)
			return
		}
		if try >= eventMaxTries || r.isClosed() {
			r.log.Error("Event not recorded: the API server did not take it", "tries", try, "object", out.InvolvedObject.Name, "reason", out.Reason, "message", out.Message, "err", err)
			r.dropped(EventDropWriteFailed)
			return
		}
		wait := r.opts.RetryInterval
		if try == 1 {
			wait = time.Duration(rand.Float64() * float64(wait))
		}
		r.log.Debug("Event not written yet, retrying", "object", out.InvolvedObject.Name, "reason", out.Reason, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.stop:
			t.Stop()
		}
	}
}

// writeOnce patches the Event out repeats (Create if it is gone) or creates it.
func (r *Recorder) writeOnce(ctx context.Context, out *corev1.Event, patch []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, eventWriteTimeout)
	defer cancel()
	if patch != nil {
		written, err := r.sink.Patch(ctx, out.Namespace, out.Name, patch)
		if !apierrors.IsNotFound(err) {
			return written, err
		}
	}
	e := *out
	e.ResourceVersion = ""
	return r.sink.Create(ctx, &e)
}

func (r *Recorder) isClosed() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// retriable: the API server may take the write later (it was unreachable, or
// said so). record retries only the first kind; a 429 or 5xx a restarting API
// server answers is as transient.
func retriable(err error) bool {
	var rce *rest.RequestConstructionError
	if errors.As(err, &rce) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

// eventCountPatch is the JSON merge patch of a repeat: what record's strategic
// merge patch changes, on fields that are all scalars.
type eventCountPatch struct {
	Count         int32       `json:"count"`
	LastTimestamp metav1.Time `json:"lastTimestamp"`
	Message       string      `json:"message"`
}

func countPatch(e *corev1.Event) []byte {
	b, _ := json.Marshal(eventCountPatch{Count: e.Count, LastTimestamp: e.LastTimestamp, Message: e.Message}) // scalars: no error
	return b
}
