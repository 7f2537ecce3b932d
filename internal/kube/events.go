package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
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
func NewEventRecorder(ctx context.Context, client kubernetes.Interface, nodeName string) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent, Host: nodeName})
	return recorder, broadcaster.Shutdown
}

// NodeRef is the object reference for Events on the node (threshold met, reclaim,
// conditions), as the kubelet makes it: the node's name as its UID, so Events stay
// attached across node re-registration. Use it with the recorder of NewEventRecorder.
func NodeRef(nodeName string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
}
