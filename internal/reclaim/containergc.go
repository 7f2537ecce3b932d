package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Labels the kubelet puts on every container it creates (pkg/kubelet/types/labels.go).
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

// runtimePods is one listing of the runtime's sandboxes and containers, grouped by pod UID.
type runtimePods struct {
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	sandboxUID map[string]types.UID // sandbox ID -> pod UID
	// readyUIDs have a READY sandbox: the kubelet is running the pod, whatever the live set says.
	readyUIDs map[types.UID]bool
	// runningUIDs have a running container.
	runningUIDs map[types.UID]bool
}

func listRuntimePods(ctx context.Context, rt runtimeService) (*runtimePods, error) {
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	containers, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	p := &runtimePods{
		sandboxes:   sandboxes,
		containers:  containers,
		sandboxUID:  map[string]types.UID{},
		readyUIDs:   map[types.UID]bool{},
		runningUIDs: map[types.UID]bool{},
	}
	for _, sb := range sandboxes {
		uid := types.UID(sb.GetMetadata().GetUid())
		p.sandboxUID[sb.Id] = uid
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			p.readyUIDs[uid] = true
		}
	}
	for _, c := range containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if uid := p.podUID(c); uid != "" {
				p.runningUIDs[uid] = true
			}
		}
	}
	return p, nil
}

// podUID is the pod a container belongs to: its sandbox's, or the kubelet's label. Empty for a
// container the kubelet did not create.
func (p *runtimePods) podUID(c *runtimeapi.Container) types.UID {
	if uid, ok := p.sandboxUID[c.PodSandboxId]; ok && uid != "" {
		return uid
	}
	return types.UID(c.Labels[labelPodUID])
}

// podGone reports whether the pod with uid is no longer on the node: not in the live set and
// not running a ready sandbox. With an unknown live set no pod is gone.
func (p *runtimePods) podGone(uid types.UID, live LivePods) bool {
	if live == nil || uid == "" {
		return false
	}
	return !live.Has(uid) && !p.readyUIDs[uid]
}

// containerGCPlan is what container GC removes, decided from one listing.
type containerGCPlan struct {
	containers []*runtimeapi.Container
	sandboxes  []*runtimeapi.PodSandbox
}

// planContainerGC decides, as the kubelet's container GC does with evictNonDeletedPods:
//   - containers of gone pods: every one that is not running;
//   - containers of other pods: of each (pod, container name), the dead instances except the
//     newest, which the kubelet needs (restart count, `kubectl logs --previous`, init
//     containers that must not run again);
//   - sandboxes that are not ready and have no container left: all of a gone pod's, and all
//     but the newest of another pod's.
//
// Running containers, ready sandboxes and containers the kubelet did not create are never touched.
func planContainerGC(p *runtimePods, live LivePods) containerGCPlan {
	var plan containerGCPlan
	type key struct {
		uid  types.UID
		name string
	}
	dead := map[key][]*runtimeapi.Container{}
	for _, c := range p.containers {
		uid := p.podUID(c)
		if uid == "" || c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if p.podGone(uid, live) {
			plan.containers = append(plan.containers, c)
			continue
		}
		// A created container not yet started belongs to a pod being started: keep it.
		if c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			continue
		}
		name := c.GetMetadata().GetName()
		if name == "" {
			name = c.Labels[labelContainerName]
		}
		k := key{uid, name}
		dead[k] = append(dead[k], c)
	}
	for _, instances := range dead {
		sort.Slice(instances, func(i, j int) bool { return newerContainer(instances[i], instances[j]) })
		plan.containers = append(plan.containers, instances[1:]...)
	}

	removed := map[string]bool{}
	for _, c := range plan.containers {
		removed[c.Id] = true
	}
	remaining := map[string]int{} // sandbox ID -> containers left after the plan
	for _, c := range p.containers {
		if !removed[c.Id] {
			remaining[c.PodSandboxId]++
		}
	}
	byUID := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, sb := range p.sandboxes {
		uid := types.UID(sb.GetMetadata().GetUid())
		if uid == "" {
			continue
		}
		byUID[uid] = append(byUID[uid], sb)
	}
	for uid, sbs := range byUID {
		sort.Slice(sbs, func(i, j int) bool { return sbs[i].CreatedAt > sbs[j].CreatedAt })
		gone := p.podGone(uid, live)
		for i, sb := range sbs {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY || remaining[sb.Id] > 0 {
				continue
			}
			if gone || i > 0 {
				plan.sandboxes = append(plan.sandboxes, sb)
			}
		}
	}
	sort.Slice(plan.containers, func(i, j int) bool { return plan.containers[i].CreatedAt < plan.containers[j].CreatedAt })
	sort.Slice(plan.sandboxes, func(i, j int) bool { return plan.sandboxes[i].CreatedAt < plan.sandboxes[j].CreatedAt })
	return plan
}

// newerContainer orders instances newest first: by attempt, then creation time.
func newerContainer(a, b *runtimeapi.Container) bool {
	aa, ba := a.GetMetadata().GetAttempt(), b.GetMetadata().GetAttempt()
	if aa != ba {
		return aa > ba
	}
	return a.CreatedAt > b.CreatedAt
}

// collectContainers removes dead containers and sandboxes (see planContainerGC), and the log
// file of each removed container, as the kubelet does.
func (r *Reclaimer) collectContainers(ctx context.Context, rt runtimeService, req Request, res *Result) error {
	pods, err := listRuntimePods(ctx, rt)
	if err != nil {
		return err
	}
	if req.LivePods == nil {
		r.log.Warn("container GC: live pod set unknown, removing only older dead instances of containers")
		res.Errors = append(res.Errors, ErrLivePodsUnknown)
	}
	plan := planContainerGC(pods, req.LivePods)
	r.log.Info("container GC", "containers", len(pods.containers), "sandboxes", len(pods.sandboxes),
		"removeContainers", len(plan.containers), "removeSandboxes", len(plan.sandboxes))

	for _, c := range plan.containers {
		if err := ctx.Err(); err != nil {
			return err
		}
		attrs := []any{"container", c.Id, "name", c.GetMetadata().GetName(), "attempt", c.GetMetadata().GetAttempt(),
			"pod", c.Labels["io.kubernetes.pod.namespace"] + "/" + c.Labels["io.kubernetes.pod.name"],
			"podUID", pods.podUID(c), "state", c.State.String()}
		if r.dryRun.Load() {
			r.log.Info("container GC: would remove container", attrs...)
			res.WouldRemove++
			continue
		}
		logPath := ""
		if st, err := rt.ContainerStatus(ctx, c.Id, false); err == nil {
			logPath = st.GetStatus().GetLogPath()
		}
		if err := rt.RemoveContainer(ctx, c.Id); err != nil {
			if status.Code(err) == codes.NotFound {
				continue
			}
			if isRuntimeGone(ctx, err) {
				return fmt.Errorf("CRI RemoveContainer %s: %w", c.Id, err)
			}
			r.log.Warn("container GC: removing container failed", append(attrs, "err", err)...)
			res.Errors = append(res.Errors, fmt.Errorf("CRI RemoveContainer %s: %w", c.Id, err))
			continue
		}
		res.ItemsRemoved++
		r.log.Info("container GC: removed container", attrs...)
		if err := r.removeContainerLog(logPath); err != nil {
			res.Errors = append(res.Errors, err)
		}
	}

	for _, sb := range plan.sandboxes {
		if err := ctx.Err(); err != nil {
			return err
		}
		attrs := []any{"sandbox", sb.Id, "pod", sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName(),
			"podUID", sb.GetMetadata().GetUid(), "attempt", sb.GetMetadata().GetAttempt()}
		if r.dryRun.Load() {
			r.log.Info("container GC: would remove sandbox", attrs...)
			res.WouldRemove++
			continue
		}
		// A not-ready sandbox may still hold its network namespace; stopping is idempotent.
		if err := rt.StopPodSandbox(ctx, sb.Id); err != nil && status.Code(err) != codes.NotFound {
			if isRuntimeGone(ctx, err) {
				return fmt.Errorf("CRI StopPodSandbox %s: %w", sb.Id, err)
			}
			res.Errors = append(res.Errors, fmt.Errorf("CRI StopPodSandbox %s: %w", sb.Id, err))
			continue
		}
		if err := rt.RemovePodSandbox(ctx, sb.Id); err != nil {
			if status.Code(err) == codes.NotFound {
				continue
			}
			if isRuntimeGone(ctx, err) {
				return fmt.Errorf("CRI RemovePodSandbox %s: %w", sb.Id, err)
			}
			r.log.Warn("container GC: removing sandbox failed", append(attrs, "err", err)...)
			res.Errors = append(res.Errors, fmt.Errorf("CRI RemovePodSandbox %s: %w", sb.Id, err))
			continue
		}
		res.ItemsRemoved++
		r.log.Info("container GC: removed sandbox", attrs...)
	}
	return nil
}

// removeContainerLog removes a removed container's log file (the runtime leaves it; the
// kubelet's removeContainerLog deletes it too).
func (r *Reclaimer) removeContainerLog(logPath string) error {
	// Only files under the pod log directory: a log path is the kubelet's choice, but a runtime
	// client other than the kubelet may have set anything.
	if logPath == "" || !withinDir(r.opts.PodLogsDir, logPath) {
		return nil
	}
	p := r.hostPath(logPath)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing container log %s: %w", p, err)
	}
	return nil
}

// withinDir reports whether path lies strictly below dir (both absolute, lexically cleaned).
func withinDir(dir, path string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && filepath.IsAbs(path) && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}
