//go:build integration

package kube

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A repeated Event reaches the API server as one Event with a count, written with the
// agent's own token (its RBAC: create and patch on events) as one create and one JSON
// merge patch, with evictiond on the node as its source.
func TestRepeatedEventIsOneEventWithCount2OnTheAPIServer(t *testing.T) {
	n := newTestNode(t)
	pod := createPod(t, n.namespace, "victim", n.name, nil, nil)
	_, _, offset := auditWrites(t, agentUsername, 0)

	rec, stop := NewEventRecorder(context.Background(), n.agent, EventRecorderOptions{NodeName: n.name, Logger: testLogger(t)})
	for range 2 {
		rec.AnnotatedEventf(pod, map[string]string{"evictiond.io/signal": "memory.available"}, corev1.EventTypeWarning,
			EventReasonEvicted, "The node was low on resource: %s.", "memory")
		rec.Eventf(NodeRef(n.name), corev1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", "memory")
	}
	stop() // flushes the queue

	for _, tc := range []struct {
		namespace, kind, name, reason string
		ref                           corev1.ObjectReference
	}{
		{n.namespace, "Pod", pod.Name, EventReasonEvicted,
			corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}},
		{metav1.NamespaceDefault, "Node", n.name, "EvictionThresholdMet", *NodeRef(n.name)},
	} {
		events := eventsFor(t, tc.namespace, tc.kind, tc.name)
		if len(events) != 1 {
			t.Fatalf("%s %s: %d Events, want 1: %+v", tc.kind, tc.name, len(events), events)
		}
		e := events[0]
		if e.Count != 2 || e.Reason != tc.reason || e.Type != corev1.EventTypeWarning || e.InvolvedObject != tc.ref {
			t.Errorf("%s Event: count %d, reason %s, type %s, object %+v; want 2, %s, Warning, %+v", tc.kind, e.Count, e.Reason, e.Type, e.InvolvedObject, tc.reason, tc.ref)
		}
		if want := (corev1.EventSource{Component: EventComponent, Host: n.name}); e.Source != want ||
			e.ReportingController != EventComponent || e.ReportingInstance != n.name {
			t.Errorf("%s Event: source %+v, reporting %s/%s; want %+v", tc.kind, e.Source, e.ReportingController, e.ReportingInstance, want)
		}
		if e.LastTimestamp.Before(&e.FirstTimestamp) || e.FirstTimestamp.IsZero() {
			t.Errorf("%s Event: first %v, last %v", tc.kind, e.FirstTimestamp, e.LastTimestamp)
		}
	}
	if e := eventsFor(t, n.namespace, "Pod", pod.Name)[0]; e.Message != "The node was low on resource: memory." ||
		e.Annotations["evictiond.io/signal"] != "memory.available" {
		t.Errorf("pod Event: message %q, annotations %v", e.Message, e.Annotations)
	}

	_, writes, _ := auditWrites(t, agentUsername, offset)
	var verbs []string
	for _, w := range writes {
		if strings.Contains(w, "/events") {
			verbs = append(verbs, strings.Fields(w)[0])
		}
	}
	slices.Sort(verbs)
	if want := []string{"create", "create", "patch", "patch"}; !slices.Equal(verbs, want) {
		t.Errorf("the agent's writes of Events: %v, want %v (one create and one patch each)", writes, want)
	}
}
