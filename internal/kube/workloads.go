package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/evictiond/evictiond/internal/policy"
)

// WorkloadRefs names a workload in an Event (the EvictionLoop warning): the
// reference must carry the object's UID, or `kubectl describe deployment`
// does not list the Event (it selects Events by involvedObject.uid).
type WorkloadRefs struct {
	Client Interface
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
	// The metadata alone, through the core group's transport: one field does
	// not justify linking the apps/v1 typed client (0.66 MB of the binary,
	// docs/benchmarks.md "bench-footprint"; Client serves the groups it needs).
	rc, ok := r.Client.RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		// A fake clientset's (simulate's API server) has no transport.
		return ref, fmt.Errorf("reading deployment %s/%s for its UID: the API client has no REST transport", w.Namespace, w.Name)
	}
	raw, err := rc.Get().AbsPath("/apis/apps/v1/namespaces", w.Namespace, "deployments", w.Name).
		SetHeader("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").DoRaw(ctx)
	if err != nil {
		return ref, fmt.Errorf("reading deployment %s/%s for its UID: %w", w.Namespace, w.Name, err)
	}
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &meta); err != nil || meta.UID == "" {
		return ref, fmt.Errorf("reading deployment %s/%s for its UID: %d bytes without one (%v)", w.Namespace, w.Name, len(raw), err)
	}
	ref.UID = meta.UID
	return ref, nil
}
