package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
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

// NewEventRecorder returns a recorder whose Events name evictiond on nodeName as their
// source, like the kubelet's do, and a function that flushes and stops it. Events are
// written asynchronously; client-go's correlator aggregates repeats and rate-limits
// spam per object.
func NewEventRecorder(ctx context.Context, client Interface, nodeName string) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(eventSink{client.CoreV1()})
	recorder := broadcaster.NewRecorder(Scheme, corev1.EventSource{Component: EventComponent, Host: nodeName})
	return recorder, broadcaster.Shutdown
}

// eventSink is client-go's typed core/v1 EventSinkImpl: each Event is written in its own
// namespace, a repeat as the correlator's strategic merge patch.
type eventSink struct{ core CoreV1Interface }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Create(context.Background(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Update(context.Background(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}

// NodeRef is the object reference for Events on the node (threshold met, reclaim,
// conditions), as the kubelet makes it: the node's name as its UID, so Events stay
// attached across node re-registration. Use it with the recorder of NewEventRecorder.
func NodeRef(nodeName string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
}
