//go:build integration

package reclaim

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/testenv/images"
)

const padBytes = 8 << 20 // each test image carries 8 MiB of incompressible padding

func (e *criEnv) runImageGC(r *Reclaimer, need int64) Result {
	e.t.Helper()
	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimImageGC, Signal: policy.SignalImageFsAvailable,
		Need: need, LivePods: sets.New[types.UID]()})
	if err != nil {
		e.t.Fatalf("image GC: %v", err)
	}
	return res
}

func TestImageGCKeepsInUsePinnedAndYoungImages(t *testing.T) {
	e := newCRIEnv(t, 512<<20)
	usedByExited := e.importPadded("example.test/used:v1", padBytes)
	pinned := e.importPadded("example.test/pinned:v1", padBytes)
	pinnedByRepo := e.importPadded("example.test/pinned-repo:v7", padBytes)
	old1 := e.importPadded("example.test/old1:v1", padBytes)
	old2 := e.importPadded("example.test/old2:v1", padBytes)

	p := e.runPod("user", "uid-user")
	e.waitExited(e.runContainer(p, "app", 0, usedByExited.Ref, true, "/bin/true"))

	r := e.newReclaimer(func(o *Options) {
		o.PinnedImages = []string{pinned.Ref, "example.test/pinned-repo"}
	})
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatalf("TrackImages: %v", err)
	}
	e.clock.Step(2 * time.Hour) // everything so far is now older than the 1h minimum age
	young := e.importPadded("example.test/young:v1", padBytes)

	res := e.runImageGC(r, 1<<40) // more than there is: GC takes every eligible image
	present := e.imageIDs()
	for name, want := range map[string]struct {
		id   string
		kept bool
	}{
		"used by an exited container": {usedByExited.ID, true},
		"pinned by reference":         {pinned.ID, true},
		"pinned by repository":        {pinnedByRepo.ID, true},
		"young":                       {young.ID, true},
		"sandbox image":               {e.pause.ID, true},
		"old unused 1":                {old1.ID, false},
		"old unused 2":                {old2.ID, false},
		"old unused busybox":          {e.busybox.ID, false},
	} {
		if present[want.id] != want.kept {
			t.Errorf("%s image %s present = %v, want %v", name, want.id, present[want.id], want.kept)
		}
	}
	if res.ItemsRemoved != 3 {
		t.Errorf("ItemsRemoved = %d, want 3", res.ItemsRemoved)
	}
	if res.Freed < 2*padBytes {
		t.Errorf("Freed = %d bytes, want at least the two padded images' %d", res.Freed, 2*padBytes)
	}
	t.Logf("image GC removed %d images, freed %d bytes (statfs) in %s", res.ItemsRemoved, res.Freed, res.Duration)
}

// TestImageGCStopsOnceNeedIsMetInLRUOrderAcrossRestart uses images at different times, restarts
// the agent (a new Reclaimer on the same state file), and asks for a little less than one
// image's footprint at a time: each run removes exactly the least recently used image.
func TestImageGCStopsOnceNeedIsMetInLRUOrderAcrossRestart(t *testing.T) {
	e := newCRIEnv(t, 512<<20)
	imgs := map[string]images.Built{}
	for _, name := range []string{"a", "b", "c", "d"} {
		imgs[name] = e.importPadded("example.test/lru-"+name+":v1", padBytes)
	}
	r := e.newReclaimer(nil)
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)

	// Use the images in the order c, a, d, b: LRU order is then c, a, d, b... except b is used
	// last of all, so the expected removal order is c, a, d.
	p := e.runPod("user", "uid-user")
	for i, name := range []string{"c", "a", "d", "b"} {
		id := e.runContainer(p, "app-"+name, 0, imgs[name].Ref, true, "/bin/true")
		e.waitExited(id)
		if err := r.TrackImages(e.ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.rt.RemoveContainer(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		e.clock.Step(time.Duration(i+1) * time.Minute)
	}
	// busybox was never used: it counts as used when first seen, before all others, so it goes
	// first; then c, a, d.
	wantOrder := []string{e.busybox.ID, imgs["c"].ID, imgs["a"].ID, imgs["d"].ID}

	// Restart: the old Reclaimer goes away, a new one reads the state file.
	r.Close()
	if _, err := os.Stat(e.stateF); err != nil {
		t.Fatalf("state file not written: %v", err)
	}
	r = e.newReclaimer(nil)

	// One padded image occupies about twice its padding (content store + unpacked snapshot);
	// ask for less than one padded image.
	need := int64(padBytes)
	var removedOrder []string
	for range 3 {
		before := e.imageIDs()
		res := e.runImageGC(r, need)
		after := e.imageIDs()
		var gone []string
		for id := range before {
			if !after[id] {
				gone = append(gone, id)
			}
		}
		sort.Strings(gone)
		t.Logf("need %d: removed %v, freed %d", need, gone, res.Freed)
		if res.Freed < need {
			t.Errorf("Freed = %d, want at least need %d", res.Freed, need)
		}
		removedOrder = append(removedOrder, gone...)
		// The busybox image is small: the first run must go on to the next image to meet the need.
		if len(removedOrder) >= len(wantOrder) {
			break
		}
	}
	if len(removedOrder) < 3 {
		t.Fatalf("removed %v, want at least 3 images", removedOrder)
	}
	if !sameSet(removedOrder[:2], wantOrder[:2]) {
		t.Errorf("first run removed %v, want busybox and c %v (LRU)", removedOrder[:2], wantOrder[:2])
	}
	if removedOrder[2] != wantOrder[2] {
		t.Errorf("second run removed %s, want a %s", removedOrder[2], wantOrder[2])
	}
	if len(removedOrder) > 3 && removedOrder[3] != wantOrder[3] {
		t.Errorf("third run removed %s, want d %s", removedOrder[3], wantOrder[3])
	}
	if len(removedOrder) > len(wantOrder) {
		t.Errorf("GC removed %v, more than the need required", removedOrder)
	}
	if !e.imageIDs()[imgs["b"].ID] {
		t.Errorf("most recently used image b was removed")
	}

	var file imageStateFile
	data, err := os.ReadFile(e.stateF)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("state file is not valid JSON: %v", err)
	}
	if rec, ok := file.Images[imgs["b"].ID]; !ok || rec.LastUsed.IsZero() {
		t.Errorf("state file record of b = %+v, %v; want a last-used time", rec, ok)
	}
	if _, ok := file.Images[imgs["c"].ID]; ok {
		t.Errorf("state file still has removed image c")
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	return sets.New(a...).Equal(sets.New(b...))
}

func TestImageGCKeepsImageOfContainerCreatedBetweenListingAndRemoval(t *testing.T) {
	e := newCRIEnv(t, 512<<20)
	first := e.importPadded("example.test/first:v1", padBytes)
	second := e.importPadded("example.test/second:v1", padBytes)
	r := e.newReclaimer(func(o *Options) { o.PinnedImages = []string{e.busybox.Ref} })
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)
	// Make "first" the LRU candidate: "second" was used later.
	p := e.runPod("user", "uid-user")
	id := e.runContainer(p, "warm", 0, second.Ref, false)
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.RemoveContainer(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Minute)

	var raced []string
	r.beforeImageRemoval = func(ctx context.Context, imageID string) {
		if imageID == first.ID && len(raced) == 0 {
			// The kubelet starts a pod with this image after GC listed containers.
			raced = append(raced, e.runContainer(p, "late", 0, first.Ref, false))
		}
	}
	res := e.runImageGC(r, padBytes)
	if len(raced) != 1 {
		t.Fatalf("the race hook never ran for image %s", first.ID)
	}
	present := e.imageIDs()
	if !present[first.ID] {
		t.Errorf("image %s of the container created during GC was removed", first.ID)
	}
	if present[second.ID] {
		t.Errorf("image %s should have been removed in place of the raced one", second.ID)
	}
	if res.ItemsRemoved != 1 {
		t.Errorf("ItemsRemoved = %d, want 1", res.ItemsRemoved)
	}
	// The container can still start: its image is intact.
	if err := e.rt.StartContainer(e.ctx, raced[0]); err != nil {
		t.Errorf("starting the raced container: %v", err)
	}
}

func TestImageGCDryRunRemovesNothing(t *testing.T) {
	e := newCRIEnv(t, 512<<20)
	a := e.importPadded("example.test/dry-a:v1", padBytes)
	b := e.importPadded("example.test/dry-b:v1", padBytes)
	r := e.newReclaimer(func(o *Options) { o.DryRun = true; o.PinnedImages = []string{e.busybox.Ref} })
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)
	res := e.runImageGC(r, padBytes/2)
	if res.WouldRemove != 1 || res.ItemsRemoved != 0 {
		t.Errorf("WouldRemove = %d, ItemsRemoved = %d; want 1 and 0 (one image covers the need)", res.WouldRemove, res.ItemsRemoved)
	}
	present := e.imageIDs()
	if !present[a.ID] || !present[b.ID] {
		t.Errorf("dry run removed an image")
	}
}

func TestRuntimeGoneIsAnErrorAndRemovesNothingThenRecovers(t *testing.T) {
	e := newCRIEnv(t, 512<<20)
	old := e.importPadded("example.test/old:v1", padBytes)
	r := e.newReclaimer(func(o *Options) { o.CallTimeout = 5 * time.Second; o.PinnedImages = []string{e.busybox.Ref} })
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)

	e.ctrd.Kill()
	for _, step := range []policy.ReclaimStep{policy.ReclaimContainerGC, policy.ReclaimImageGC, policy.ReclaimPodLogs} {
		start := time.Now()
		_, err := r.Run(e.ctx, Request{Step: step, Need: padBytes, LivePods: sets.New[types.UID]()})
		if err == nil {
			t.Errorf("%s with the runtime gone: no error", step)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s with the runtime gone took %s, want bounded by the call timeout", step, d)
		}
		t.Logf("%s with the runtime gone: %v", step, err)
	}

	e.ctrd.Restart(t)
	if !e.imageIDs()[old.ID] {
		t.Fatalf("image removed while the runtime was gone")
	}
	// gRPC reconnects on its own backoff; the agent just retries on its next pass.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := r.Run(e.ctx, Request{Step: policy.ReclaimImageGC, Need: 1, LivePods: sets.New[types.UID]()})
		if err == nil {
			if res.ItemsRemoved == 0 || e.imageIDs()[old.ID] {
				t.Errorf("after the runtime came back, image GC removed %d images; want the old one gone", res.ItemsRemoved)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("image GC still failing 20s after the runtime came back: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestImagesExplainsWhatImageGCWouldDo(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	used := e.importPadded("example.test/used:v1", 4096)
	old := e.importPadded("example.test/old:v1", 4096)
	p := e.runPod("user", "uid-user")
	e.runContainer(p, "app", 0, used.Ref, false)
	r := e.newReclaimer(nil)
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)
	young := e.importPadded("example.test/young:v1", 4096)

	infos, err := r.Images(e.ctx)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	got := map[string]ImageInfo{}
	for _, info := range infos {
		got[info.ID] = info
	}
	for id, want := range map[string]string{used.ID: KeptInUse, e.pause.ID: KeptPinned, young.ID: KeptYoung, old.ID: "", e.busybox.ID: ""} {
		if got[id].KeptBecause != want {
			t.Errorf("image %s kept because %q, want %q", id, got[id].KeptBecause, want)
		}
	}
	// busybox and old were first seen together and never used: tie broken by ID.
	if infos[0].EvictionOrder != 1 || infos[1].EvictionOrder != 2 || infos[2].EvictionOrder != 0 {
		t.Errorf("eviction order not first in the list: %+v", infos)
	}
}

// For an inode signal, need and gain are counted in inodes (statfs free inodes).
func TestImageGCForAnInodeSignalCountsInodes(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	for _, name := range []string{"a", "b", "c"} {
		e.importPadded("example.test/inodes-"+name+":v1", 4096)
	}
	r := e.newReclaimer(func(o *Options) { o.PinnedImages = []string{e.busybox.Ref} })
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(2 * time.Hour)
	res, err := r.Run(e.ctx, Request{Step: policy.ReclaimImageGC, Signal: policy.SignalImageFsInodesFree,
		Need: 1, LivePods: sets.New[types.UID]()})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Unit != "inodes" {
		t.Errorf("Unit = %q, want inodes", res.Unit)
	}
	// One image's files, directories and content blobs are well over one inode: one removal meets the need.
	if res.ItemsRemoved != 1 || res.Freed < 1 {
		t.Errorf("removed %d images freeing %d inodes; want 1 image and at least 1 inode", res.ItemsRemoved, res.Freed)
	}
	t.Logf("one image freed %d inodes", res.Freed)
}

func TestRunImageTrackerRecordsUseWhileRunning(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	img := e.importPadded("example.test/tracked:v1", 4096)
	r := e.newReclaimer(nil)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { r.RunImageTracker(ctx, 50*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	p := e.runPod("user", "uid-user")
	e.runContainer(p, "app", 0, img.Ref, false)
	// Read the state file, not r.Images (which tracks by itself): only the tracker writes it here.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var file imageStateFile
		if data, err := os.ReadFile(e.stateF); err == nil && json.Unmarshal(data, &file) == nil {
			if rec, ok := file.Images[img.ID]; ok && !rec.LastUsed.IsZero() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file has no last-used time for %s 10s after a container started using it", img.ID)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSandboxImageKeptOnTheRuntimesPinnedFlag proves how the sandbox image survives image GC on
// containerd 2: its verbose CRI status no longer names the sandbox image (1.x's sandboxImage),
// so nothing but the runtime's own pinned flag on the image (pinned_images.sandbox) keeps it,
// with no reclaim.imageGC.pinnedImages configured.
func TestSandboxImageKeptOnTheRuntimesPinnedFlag(t *testing.T) {
	e := newCRIEnv(t, 256<<20)
	if got := sandboxImage(e.ctx, e.rt); got != "" {
		t.Errorf("sandbox image from the verbose CRI status = %q, want none on containerd 2 (only 1.x reports it there)", got)
	}
	st, err := e.is.ImageStatus(e.ctx, &runtimeapi.ImageSpec{Image: e.pause.ID}, false)
	if err != nil {
		t.Fatalf("ImageStatus %s: %v", e.pause.ID, err)
	}
	if !st.GetImage().GetPinned() {
		t.Fatalf("sandbox image %s (%s) not reported pinned by containerd: %v", e.pause.ID, e.ctrd.SandboxImage, st.GetImage())
	}

	r := e.newReclaimer(nil) // no PinnedImages
	if err := r.TrackImages(e.ctx); err != nil {
		t.Fatalf("TrackImages: %v", err)
	}
	e.clock.Step(2 * time.Hour)
	infos, err := r.Images(e.ctx)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	for _, info := range infos {
		if info.ID == e.pause.ID && info.KeptBecause != KeptPinned {
			t.Errorf("sandbox image kept because %q, want %q", info.KeptBecause, KeptPinned)
		}
	}
	e.runImageGC(r, 1<<40) // more than there is: GC takes every eligible image
	present := e.imageIDs()
	if !present[e.pause.ID] {
		t.Errorf("sandbox image %s removed by image GC", e.pause.ID)
	}
	if present[e.busybox.ID] {
		t.Errorf("unused busybox image %s kept: GC removed nothing?", e.busybox.ID)
	}
}
