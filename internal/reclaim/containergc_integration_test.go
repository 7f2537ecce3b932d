//go:build integration

package reclaim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/evictiond/evictiond/internal/policy"
)

// containerGCScene is a node with:
//   - live: a live pod whose container "app" exited twice (attempts 0 and 1) and an init
//     container that exited once;
//   - deleted: a pod gone from the API, sandbox stopped, its container exited;
//   - stillRunning: a pod missing from the live set (informer lag) whose sandbox is ready.
type containerGCScene struct {
	live, deleted, stillRunning                  *pod
	liveApp0, liveApp1, liveInit, deletedApp, sr string
}

func newContainerGCScene(t *testing.T, e *criEnv) containerGCScene {
	var s containerGCScene
	img := e.busybox.Ref
	s.live = e.runPod("live", "uid-live")
	s.liveInit = e.runContainer(s.live, "init", 0, img, true, "/bin/true")
	s.liveApp0 = e.runContainer(s.live, "app", 0, img, true, "/bin/true")
	e.waitExited(s.liveApp0)
	s.liveApp1 = e.runContainer(s.live, "app", 1, img, true, "/bin/true")
	e.waitExited(s.liveApp1)
	e.waitExited(s.liveInit)

	s.deleted = e.runPod("deleted", "uid-deleted")
	s.deletedApp = e.runContainer(s.deleted, "app", 0, img, true, "/bin/true")
	e.waitExited(s.deletedApp)
	e.stopPod(s.deleted)

	s.stillRunning = e.runPod("lagging", "uid-lagging")
	s.sr = e.runContainer(s.stillRunning, "app", 0, img, true, "/bin/true")
	e.waitExited(s.sr)
	return s
}

func TestContainerGCRemovesDeadPodsAndKeepsLastExitedContainerOfLivePods(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	s := newContainerGCScene(t, e)
	r := e.newReclaimer(nil)

	logOf := func(p *pod, rel string) string { return filepath.Join(p.config.LogDirectory, rel) }
	for _, f := range []string{logOf(s.live, "app/0.log"), logOf(s.live, "app/1.log"), logOf(s.deleted, "app/0.log")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("container log %s should exist before GC: %v", f, err)
		}
	}

	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimContainerGC, Signal: policy.SignalContainerFsAvailable,
		Need: 1, LivePods: sets.New[types.UID]("uid-live")})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Errors) != 0 {
		t.Errorf("Result.Errors = %v, want none", res.Errors)
	}

	containers := e.containerIDs()
	for id, want := range map[string]bool{
		s.liveApp0: false, s.liveApp1: true, s.liveInit: true, s.deletedApp: false, s.sr: true,
	} {
		if containers[id] != want {
			t.Errorf("container %s present = %v, want %v", id, containers[id], want)
		}
	}
	sandboxes := e.sandboxIDs()
	for id, want := range map[string]bool{s.live.sandboxID: true, s.deleted.sandboxID: false, s.stillRunning.sandboxID: true} {
		if sandboxes[id] != want {
			t.Errorf("sandbox %s present = %v, want %v", id, sandboxes[id], want)
		}
	}
	// Two containers and one sandbox went.
	if res.ItemsRemoved != 3 {
		t.Errorf("ItemsRemoved = %d, want 3 (2 containers, 1 sandbox)", res.ItemsRemoved)
	}
	if _, err := os.Stat(logOf(s.live, "app/0.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log of removed container app/0 still there (err %v)", err)
	}
	if _, err := os.Stat(logOf(s.live, "app/1.log")); err != nil {
		t.Errorf("log of kept container app/1 gone: %v", err)
	}
	if res.Unit != "bytes" || res.Filesystem == "" {
		t.Errorf("Result measured %q in %q, want bytes on the containerfs", res.Filesystem, res.Unit)
	}
	t.Logf("container GC freed %d bytes on %s in %s", res.Freed, res.Filesystem, res.Duration)
}

func TestContainerGCWithUnknownLivePodsTakesNoPodForGone(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	s := newContainerGCScene(t, e)
	r := e.newReclaimer(nil)

	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimContainerGC, Need: 1, LivePods: nil})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Errors) != 1 || !errors.Is(res.Errors[0], ErrLivePodsUnknown) {
		t.Errorf("Result.Errors = %v, want [ErrLivePodsUnknown]", res.Errors)
	}
	containers := e.containerIDs()
	for id, want := range map[string]bool{
		s.liveApp0: false, s.liveApp1: true, s.liveInit: true, s.deletedApp: true, s.sr: true,
	} {
		if containers[id] != want {
			t.Errorf("container %s present = %v, want %v", id, containers[id], want)
		}
	}
	if !e.sandboxIDs()[s.deleted.sandboxID] {
		t.Errorf("sandbox of the pod missing from an unknown live set was removed")
	}
}

func TestContainerGCDryRunRemovesNothing(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	newContainerGCScene(t, e)
	r := e.newReclaimer(func(o *Options) { o.DryRun = true })
	before, beforeSB := e.containerIDs(), e.sandboxIDs()

	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimContainerGC, Need: 1, LivePods: sets.New[types.UID]("uid-live")})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.WouldRemove != 3 || res.ItemsRemoved != 0 {
		t.Errorf("WouldRemove = %d, ItemsRemoved = %d; want 3 and 0", res.WouldRemove, res.ItemsRemoved)
	}
	if after := e.containerIDs(); len(after) != len(before) {
		t.Errorf("dry run changed containers: %d -> %d", len(before), len(after))
	}
	if after := e.sandboxIDs(); len(after) != len(beforeSB) {
		t.Errorf("dry run changed sandboxes: %d -> %d", len(beforeSB), len(after))
	}
}
