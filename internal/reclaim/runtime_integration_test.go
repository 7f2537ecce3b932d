//go:build integration

package reclaim

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

func TestReadyFollowsTheRuntime(t *testing.T) {
	e := newCRIEnv(t, 64<<20)
	r := e.newReclaimer(func(o *Options) { o.CallTimeout = 5 * time.Second })
	if err := r.Ready(e.ctx); err != nil {
		t.Fatalf("Ready with containerd up: %v", err)
	}
	e.ctrd.Kill()
	if err := r.Ready(e.ctx); err == nil {
		t.Fatal("Ready with containerd gone: no error")
	}
}

// The test containerd keeps its root on a tmpfs while "nodefs" is a directory on the machine's
// disk: a dedicated imagefs, with writable layers on it too (containerd 2.2, like 1.6, reports no
// separate container filesystem). The layout is read as the monitor reads it (nodefs).
func TestRuntimeFilesystemsShowADedicatedImagefs(t *testing.T) {
	e := newCRIEnv(t, 64<<20)
	r := e.newReclaimer(nil)
	mounts, err := nodefs.ReadRuntimeFilesystems(e.ctx, e.is)
	if err != nil {
		t.Fatal(err)
	}
	var devs [3]uint64
	for i, p := range []string{r.opts.NodeFsPath, mounts.ImageMountpoint, mounts.ContainerMountpoint} {
		u, err := nodefs.Statfs(r.hostPath(p))
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = u.Device
	}
	if got, want := nodefs.Layout(devs[0], devs[1], devs[2]), (policy.FilesystemLayout{DedicatedImageFs: true}); got != want {
		t.Errorf("layout = %+v, want %+v", got, want)
	}
}

// BenchmarkTrackImages is the per-pass cost of keeping last-used times: listing 30 images and
// 20 containers from a real containerd and updating the state file.
func BenchmarkTrackImages(b *testing.B) {
	e := newCRIEnvB(b)
	for i := range 30 {
		e.importPadded("example.test/bench-"+string(rune('a'+i%26))+string(rune('a'+i/26))+":v1", 4096)
	}
	p := e.runPod("bench", "uid-bench")
	for i := range 20 {
		e.runContainer(p, "c"+string(rune('a'+i)), 0, e.busybox.Ref, false)
	}
	r := e.newReclaimer(nil)
	b.ResetTimer()
	for b.Loop() {
		if err := r.TrackImages(e.ctx); err != nil {
			b.Fatal(err)
		}
		e.clock.Step(time.Second) // in-use images change last-used time: the file is rewritten
	}
}

// BenchmarkImageGCRemoveOneImage is one image GC run that removes one 8 MiB image.
func BenchmarkImageGCRemoveOneImage(b *testing.B) {
	e := newCRIEnvB(b)
	r := e.newReclaimer(func(o *Options) { o.ImageMinimumAge = 0; o.PinnedImages = []string{e.busybox.Ref} })
	for b.Loop() {
		b.StopTimer()
		e.importPadded("example.test/victim:v1", padBytes)
		b.StartTimer()
		res, err := r.Run(e.ctx, Request{Step: policy.ReclaimImageGC, Need: 1, LivePods: sets.New[types.UID]()})
		if err != nil || res.ItemsRemoved != 1 {
			b.Fatalf("Run: %+v, %v", res, err)
		}
	}
}

// A runtime that stops answering (frozen, socket still there) costs at most the call timeout,
// removes nothing, and GC works again once it answers.
func TestHungRuntimeTimesOutAndRemovesNothing(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	old := e.importPadded("example.test/old:v1", padBytes)
	r := e.newReclaimer(func(o *Options) { o.CallTimeout = 2 * time.Second; o.PinnedImages = []string{e.busybox.Ref} })
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)

	if err := e.ctrd.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			e.ctrd.Thaw()
		}
	}()
	start := time.Now()
	_, err := r.Run(e.ctx, Request{Step: policy.ReclaimImageGC, Need: padBytes, LivePods: sets.New[types.UID]()})
	took := time.Since(start)
	if err == nil {
		t.Fatal("image GC against a frozen runtime: no error")
	}
	if took > 10*time.Second {
		t.Errorf("image GC against a frozen runtime took %s, want about the 2s call timeout", took)
	}
	t.Logf("frozen runtime: error after %s: %v", took, err)

	if err := e.ctrd.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	if !e.imageIDs()[old.ID] {
		t.Fatal("image removed while the runtime was frozen")
	}
	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimImageGC, Need: padBytes, LivePods: sets.New[types.UID]()})
	if err != nil {
		t.Fatalf("image GC after thaw: %v", err)
	}
	if res.ItemsRemoved != 1 || e.imageIDs()[old.ID] {
		t.Errorf("after thaw: removed %d, old image present %v; want it removed", res.ItemsRemoved, e.imageIDs()[old.ID])
	}
}

// An agent that starts while the runtime is down gets errors, not a crash, and connects once
// the runtime is up.
func TestReclaimerStartedBeforeTheRuntimeConnectsLater(t *testing.T) {
	e := newCRIEnv(t, 64<<20)
	e.ctrd.Kill()
	r := e.newReclaimer(func(o *Options) { o.CallTimeout = 5 * time.Second })
	if err := r.Ready(e.ctx); err == nil {
		t.Fatal("Ready with no runtime: no error")
	}
	if _, err := r.Run(e.ctx, Request{Step: policy.ReclaimContainerGC, LivePods: sets.New[types.UID]()}); err == nil {
		t.Fatal("container GC with no runtime: no error")
	}

	e.ctrd.Restart(t)
	deadline := time.Now().Add(3 * connectRetryInterval)
	for {
		_, err := r.Run(e.ctx, Request{Step: policy.ReclaimContainerGC, LivePods: sets.New[types.UID]()})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing %s after the runtime came up: %v", 3*connectRetryInterval, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestStopPodStopsItsContainersAndSandboxOnly(t *testing.T) {
	e := newCRIEnv(t, 64<<20)
	victim := e.runPod("victim", "uid-victim")
	v1 := e.runContainer(victim, "app", 0, e.busybox.Ref, true, "/bin/sleep", "3600")
	v2 := e.runContainer(victim, "side", 0, e.busybox.Ref, true, "/bin/sleep", "3600")
	bystander := e.runPod("bystander", "uid-bystander")
	b1 := e.runContainer(bystander, "app", 0, e.busybox.Ref, true, "/bin/sleep", "3600")

	r := e.newReclaimer(nil)
	n, err := r.StopPod(e.ctx, "uid-victim", time.Second)
	if err != nil {
		t.Fatalf("StopPod: %v", err)
	}
	if n != 2 {
		t.Errorf("StopPod stopped %d containers, want 2", n)
	}
	state := func(id string) runtimeapi.ContainerState {
		st, err := e.rt.ContainerStatus(e.ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetStatus().GetState()
	}
	for id, want := range map[string]runtimeapi.ContainerState{
		v1: runtimeapi.ContainerState_CONTAINER_EXITED, v2: runtimeapi.ContainerState_CONTAINER_EXITED,
		b1: runtimeapi.ContainerState_CONTAINER_RUNNING,
	} {
		if got := state(id); got != want {
			t.Errorf("container %s state %s, want %s", id, got, want)
		}
	}
	sbs, err := e.rt.ListPodSandbox(e.ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		want := runtimeapi.PodSandboxState_SANDBOX_READY
		if sb.Id == victim.sandboxID {
			want = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		}
		if sb.State != want {
			t.Errorf("sandbox %s (%s) state %s, want %s", sb.Id, sb.Metadata.Name, sb.State, want)
		}
	}
	if _, err := r.StopPod(e.ctx, "uid-unknown", time.Second); err == nil {
		t.Error("StopPod of a pod the runtime does not know: no error")
	}
}
