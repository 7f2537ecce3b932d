package kube

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podUIDLabel is the sandbox label the kubelet sets to the pod's UID
// (k8s.io/kubelet/pkg/types.KubernetesPodUIDLabel).
const podUIDLabel = "io.kubernetes.pod.uid"

// CRIPodStopper satisfies LocalPodStopper with a CRI runtime client (the one the reclaim
// package dials, e.g. k8s.io/cri-client's remote runtime service): it stops every ready
// sandbox the kubelet created for the pod, which stops its containers and frees their
// memory. The kubelet may start a new sandbox for the pod later; ReportLocalStops deletes
// the pod through the API once it answers again so that it does not.
type CRIPodStopper struct {
	Runtime internalapi.RuntimeService
}

// StopPodSandboxByPodUID stops the pod's ready sandboxes; none is not an error.
func (s CRIPodStopper) StopPodSandboxByPodUID(ctx context.Context, podUID types.UID) error {
	sandboxes, err := s.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{podUIDLabel: string(podUID)},
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	})
	if err != nil {
		return fmt.Errorf("CRI ListPodSandbox for pod UID %s: %w", podUID, err)
	}
	var errs []error
	for _, sb := range sandboxes {
		if err := s.Runtime.StopPodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, fmt.Errorf("CRI StopPodSandbox %s of pod UID %s: %w", sb.Id, podUID, err))
		}
	}
	return errors.Join(errs...)
}
