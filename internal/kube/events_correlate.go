package kube

import (
	"container/list"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// The correlator's settings are client-go's record package's (events_cache.go),
// so Events look the same in `kubectl get events` as the kubelet's.
const (
	eventCacheSize = 4096
	// 10 Events of one object and reason with different messages within
	// 10 minutes: the next ones are combined into one Event.
	eventAggregateMaxMessages = 10
	eventAggregateInterval    = 10 * time.Minute
	// 25 Events about one object at once, then one every 5 minutes.
	eventSpamBurst = 25
	eventSpamQPS   = 1. / 300.
)

// eventCorrelator is record's EventCorrelator: it turns an Event into what to write
// (a new Event, or the count patch of a repeat) or into nothing (spam). Only the
// Recorder's writer goroutine uses it.
type eventCorrelator struct {
	clock      clock.PassiveClock
	aggregates *lru[eventAggregate]
	seen       *lru[eventSeen]
	spam       *lru[flowcontrol.PassiveRateLimiter]
}

// eventAggregate is the messages of one object's Events of one reason lately.
type eventAggregate struct {
	messages map[string]struct{}
	last     time.Time
}

// eventSeen is the Event written for a key: a repeat patches it.
type eventSeen struct {
	name  string
	count int32
	first metav1.Time
}

func newEventCorrelator(c clock.PassiveClock) *eventCorrelator {
	return &eventCorrelator{
		clock:      c,
		aggregates: newLRU[eventAggregate](eventCacheSize),
		seen:       newLRU[eventSeen](eventCacheSize),
		spam:       newLRU[flowcontrol.PassiveRateLimiter](eventCacheSize),
	}
}

// correlate returns the Event to write for e, the key its write is remembered
// under (written), and the merge patch to write if it repeats one already
// written; skip: the object's spam filter took it.
func (c *eventCorrelator) correlate(e *corev1.Event) (out *corev1.Event, key string, patch []byte, skip bool) {
	out, key = c.aggregate(e)
	if seen, ok := c.seen.get(key); ok {
		repeat := *out
		repeat.Name, repeat.FirstTimestamp, repeat.Count = seen.name, seen.first, seen.count+1
		out, patch = &repeat, countPatch(&repeat)
	}
	// As record, a repeat the spam filter takes still counts: the next one written
	// says how many there were.
	c.seen.add(key, eventSeen{name: out.Name, count: out.Count, first: out.FirstTimestamp})
	return out, key, patch, !c.allow(out)
}

// written remembers what the API server holds for key.
func (c *eventCorrelator) written(key string, e *corev1.Event) {
	c.seen.add(key, eventSeen{name: e.Name, count: e.Count, first: e.FirstTimestamp})
}

// aggregate combines an object's Events of one reason once they have had
// eventAggregateMaxMessages different messages within eventAggregateInterval,
// as record does: into one Event whose message is the latest, prefixed.
func (c *eventCorrelator) aggregate(e *corev1.Event) (*corev1.Event, string) {
	now := c.clock.Now()
	akey := objectKey(e, e.Reason, e.ReportingController, e.ReportingInstance)
	agg, ok := c.aggregates.get(akey)
	if !ok || now.Sub(agg.last) > eventAggregateInterval {
		agg = eventAggregate{messages: map[string]struct{}{}}
	}
	agg.messages[e.Message] = struct{}{}
	agg.last = now
	c.aggregates.add(akey, agg)
	if len(agg.messages) < eventAggregateMaxMessages {
		return e, objectKey(e, e.Reason, e.Message)
	}
	for m := range agg.messages { // keep the set at its bound
		delete(agg.messages, m)
		break
	}
	t := metav1.NewTime(now)
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(e.InvolvedObject.Name, t), Namespace: e.Namespace},
		InvolvedObject:      e.InvolvedObject,
		Reason:              e.Reason,
		Message:             "(combined from similar events): " + e.Message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                e.Type,
		Source:              e.Source,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
	}, akey
}

// allow takes a token from the bucket of e's source, object and type.
func (c *eventCorrelator) allow(e *corev1.Event) bool {
	key := objectKey(e)
	bucket, ok := c.spam.get(key)
	if !ok {
		bucket = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(eventSpamQPS, eventSpamBurst, c.clock)
		c.spam.add(key, bucket)
	}
	return bucket.TryAccept()
}

// objectKey is e's source, object and type, and more.
func objectKey(e *corev1.Event, more ...string) string {
	o := e.InvolvedObject
	return strings.Join(append([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, o.FieldPath,
		string(o.UID), o.APIVersion, e.Type}, more...), "\x00")
}

// lru is a map that forgets its least recently used keys beyond max.
type lru[V any] struct {
	max   int
	order *list.List // front: the most recent
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (l *lru[V]) get(key string) (V, bool) {
	el, ok := l.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToFront(el)
	return el.Value.(*lruEntry[V]).val, true
}

func (l *lru[V]) add(key string, val V) {
	if el, ok := l.items[key]; ok {
		el.Value.(*lruEntry[V]).val = val
		l.order.MoveToFront(el)
		return
	}
	l.items[key] = l.order.PushFront(&lruEntry[V]{key: key, val: val})
	if l.order.Len() > l.max {
		oldest := l.order.Back()
		l.order.Remove(oldest)
		delete(l.items, oldest.Value.(*lruEntry[V]).key)
	}
}
