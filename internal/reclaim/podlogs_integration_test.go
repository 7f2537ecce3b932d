//go:build integration

package reclaim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/evictiond/evictiond/internal/policy"
)

func TestPodLogCleanupRemovesOnlyLogsOfPodsGoneFromTheNode(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	// A pod missing from the live set whose sandbox is still ready (informer lag): kept.
	lagging := e.runPod("lagging", "uid-lagging")
	writeLog := func(dir string, size int) string {
		t.Helper()
		p := filepath.Join(e.logsDir, dir, "app", "0.log")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(e.logsDir, dir)
	}
	live := writeLog("default_live_uid-live", 1<<20)
	gone := writeLog("default_gone_uid-gone", 4<<20)
	laggingDir := lagging.config.LogDirectory
	writeLog(filepath.Base(laggingDir), 1<<20)
	fresh := writeLog("default_fresh_uid-fresh", 1<<20)
	notAPod := writeLog("not-a-pod-dir", 1<<20)

	// Age every directory but "fresh" past the minimum age.
	e.clock.SetTime(time.Now().Add(10 * time.Minute))
	now := time.Now().Add(10 * time.Minute)
	if err := os.Chtimes(fresh, now, now); err != nil {
		t.Fatal(err)
	}
	// A dangling container log link, and one whose target exists.
	dangling := filepath.Join(e.linkDir, "gone_default_app-123.log")
	if err := os.Symlink(filepath.Join(gone, "app", "0.log"), dangling); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(e.linkDir, "live_default_app-456.log")
	if err := os.Symlink(filepath.Join(live, "app", "0.log"), kept); err != nil {
		t.Fatal(err)
	}

	r := e.newReclaimer(nil)
	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimPodLogs, Signal: policy.SignalNodeFsAvailable, Need: 1,
		LivePods: sets.New[types.UID]("uid-live")})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for dir, want := range map[string]bool{live: true, gone: false, laggingDir: true, fresh: true, notAPod: true} {
		_, err := os.Stat(dir)
		if exists := err == nil; exists != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(dir), exists, want)
		}
	}
	for link, want := range map[string]bool{dangling: false, kept: true} {
		_, err := os.Lstat(link)
		if exists := err == nil; exists != want {
			t.Errorf("link %s exists = %v, want %v", filepath.Base(link), exists, want)
		}
	}
	if res.ItemsRemoved != 2 {
		t.Errorf("ItemsRemoved = %d, want 2 (one directory, one dangling link)", res.ItemsRemoved)
	}
	t.Logf("pod log cleanup freed %d bytes on %s (noisy: shared filesystem)", res.Freed, res.Filesystem)
}

func TestPodLogCleanupWithUnknownLivePodsKeepsEveryDirectory(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	dir := filepath.Join(e.logsDir, "default_gone_uid-gone")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.clock.SetTime(time.Now().Add(10 * time.Minute))
	r := e.newReclaimer(nil)
	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimPodLogs, Need: 1, LivePods: nil})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("log directory removed with an unknown live set: %v", err)
	}
	if len(res.Errors) != 1 || !errors.Is(res.Errors[0], ErrLivePodsUnknown) {
		t.Errorf("Result.Errors = %v, want [ErrLivePodsUnknown]", res.Errors)
	}
}
