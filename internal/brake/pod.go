package brake

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodFreezer is a Brake on the pods of this node: it finds a pod's cgroup
// with Locate (monitor.Monitor.PodCgroup) and freezes, thaws or kills it.
// It is what the agent drives around an eviction request.
type PodFreezer struct {
	b      *Brake
	locate func(*v1.Pod) (PodCgroup, error)
	expire func(Hold, error)
}

// NewPodFreezer returns a PodFreezer locating pod cgroups with locate.
func NewPodFreezer(locate func(*v1.Pod) (PodCgroup, error)) *PodFreezer {
	f := &PodFreezer{locate: locate}
	f.b = New(func(h Hold, err error) {
		if f.expire != nil {
			f.expire(h, err)
		}
	})
	return f
}

// OnExpire sets what runs (on a timer goroutine) when a hold reached its
// deadline and was thawed. Call it before the first Freeze.
func (f *PodFreezer) OnExpire(fn func(Hold, error)) { f.expire = fn }

// Freeze freezes the pod's cgroup for at most maxFreeze.
func (f *PodFreezer) Freeze(pod *v1.Pod, maxFreeze time.Duration) (Hold, error) {
	key := pod.Namespace + "/" + pod.Name
	cg, err := f.locate(pod)
	if err != nil {
		return Hold{}, fmt.Errorf("freeze pod %s: locating its cgroup: %w", key, err)
	}
	return f.b.Freeze(pod.UID, key, cg, maxFreeze)
}

// Thaw ends the pod's hold; ok is false when it was not held.
func (f *PodFreezer) Thaw(uid types.UID) (Hold, bool, error) { return f.b.Thaw(uid) }

// Kill ends the pod's hold by killing its tasks; ok is false when it was not held.
func (f *PodFreezer) Kill(uid types.UID, timeout time.Duration) (Hold, int, bool, error) {
	return f.b.Kill(uid, timeout)
}

// Held lists the holds, oldest first.
func (f *PodFreezer) Held() []Hold { return f.b.Held() }

// ThawAll ends every hold.
func (f *PodFreezer) ThawAll() []error { return f.b.ThawAll() }

// PodStopper is the CRI stop the evictor uses while the API server is
// unreachable (kube.LocalPodStopper).
type PodStopper interface {
	StopPodSandboxByPodUID(ctx context.Context, podUID types.UID) error
}

// KillBeforeStop wraps the local CRI stop: a pod the brake holds frozen is
// killed (and thawed) first, since on cgroup v1 a frozen task acts on the
// runtime's SIGTERM and SIGKILL only once thawed, and the stop would wait
// out its timeout on it.
type KillBeforeStop struct {
	Stopper PodStopper
	Freezer *PodFreezer
	// KillTimeout bounds the wait for the killed tasks. Default 5s.
	KillTimeout time.Duration
}

// StopPodSandboxByPodUID kills a held pod, then stops it through the CRI.
func (k KillBeforeStop) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error {
	timeout := k.KillTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if _, _, _, err := k.Freezer.Kill(uid, timeout); err != nil {
		return err
	}
	return k.Stopper.StopPodSandboxByPodUID(ctx, uid)
}
