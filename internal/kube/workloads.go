package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/evictiond/evictiond/internal/policy"
)

// WorkloadRefs names a workload in an Event (the EvictionLoop warning): the
// reference must carry the object's UID, or `kubectl describe deployment`
// does not list the Event (it selects Events by involvedObject.uid).
type WorkloadRefs struct {
	Client kubernetes.Interface
}

// Reference returns w's object reference. Only a Deployment's UID is not on
// its pods (their owner is a ReplicaSet): it is read from the API server (get
// on deployments, the one RBAC rule loops need). When that read fails the
// reference has no UID and the error says why: the Event is still recorded in
// the workload's namespace (kubectl get events lists it).
func (r WorkloadRefs) Reference(ctx context.Context, w policy.Workload) (*corev1.ObjectReference, error) {
	ref := &corev1.ObjectReference{Kind: w.Kind, APIVersion: w.APIVersion, Namespace: w.Namespace, Name: w.Name, UID: w.UID}
	if w.Kind != policy.WorkloadDeployment || w.UID != "" || r.Client == nil {
		return ref, nil
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultAPITimeout)
	defer cancel()
	d, err := r.Client.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return ref, fmt.Errorf("reading deployment %s/%s for its UID: %w", w.Namespace, w.Name, err)
	}
	ref.UID = d.UID
	return ref, nil
}
