package reclaim

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPod stops a pod on this node through the CRI, for the last rung of the eviction ladder
// (hard pressure while the API server is unreachable): each running container gets SIGTERM and
// grace to exit before SIGKILL (CRI StopContainer), then the pod's sandboxes are stopped. It
// returns how many containers were running. Nothing is removed: the kubelet sees the pod's
// containers exit and reports it once the API is back. With DryRun it only logs.
func (r *Reclaimer) StopPod(ctx context.Context, uid types.UID, grace time.Duration) (int, error) {
	if uid == "" {
		return 0, fmt.Errorf("stop pod: UID is empty")
	}
	r.runMu.Lock()
	defer r.runMu.Unlock()
	rt, _, err := r.connect()
	if err != nil {
		return 0, fmt.Errorf("stop pod %s: %w", uid, err)
	}
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{labelPodUID: string(uid)},
	})
	if err != nil {
		return 0, fmt.Errorf("stop pod %s: CRI ListPodSandbox: %w", uid, err)
	}
	var stopped int
	for _, sb := range sandboxes {
		containers, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
			PodSandboxId: sb.Id,
			State:        &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		})
		if err != nil {
			return stopped, fmt.Errorf("stop pod %s: CRI ListContainers: %w", uid, err)
		}
		for _, c := range containers {
			attrs := []any{"podUID", uid, "container", c.Id, "name", c.GetMetadata().GetName(), "grace", grace}
			if r.dryRun.Load() {
				r.log.Info("would stop container locally", attrs...)
				stopped++
				continue
			}
			// The timeout is in seconds; round up so a sub-second grace still gives SIGTERM a chance.
			if err := rt.StopContainer(ctx, c.Id, int64((grace+time.Second-1)/time.Second)); err != nil && status.Code(err) != codes.NotFound {
				return stopped, fmt.Errorf("stop pod %s: CRI StopContainer %s: %w", uid, c.Id, err)
			}
			r.log.Warn("stopped container locally", attrs...)
			stopped++
		}
		if r.dryRun.Load() {
			continue
		}
		if err := rt.StopPodSandbox(ctx, sb.Id); err != nil && status.Code(err) != codes.NotFound {
			return stopped, fmt.Errorf("stop pod %s: CRI StopPodSandbox %s: %w", uid, sb.Id, err)
		}
	}
	if len(sandboxes) == 0 {
		return 0, fmt.Errorf("stop pod %s: no sandbox of this pod in the runtime", uid)
	}
	return stopped, nil
}

// LocalStopGrace is the grace a local stop gives containers, as the kubelet's
// runtime manager gives at least 2 s to a hard eviction's 1 s.
const LocalStopGrace = 2 * time.Second

// StopPodSandboxByPodUID is StopPod with LocalStopGrace, so a Reclaimer is the
// evictor's LocalPodStopper (internal/kube) as it is: one CRI client per agent.
func (r *Reclaimer) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error {
	_, err := r.StopPod(ctx, uid, LocalStopGrace)
	return err
}
