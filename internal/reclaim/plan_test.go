package reclaim

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/policy"
)

const (
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	created = runtimeapi.ContainerState_CONTAINER_CREATED
	ready   = runtimeapi.PodSandboxState_SANDBOX_READY
	unready = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
)

func sandbox(id, uid string, state runtimeapi.PodSandboxState, createdAt int64) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, State: state, CreatedAt: createdAt,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p-" + uid, Namespace: "default", Uid: uid}}
}

func container(id, sandboxID, name string, attempt uint32, state runtimeapi.ContainerState, createdAt int64) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, PodSandboxId: sandboxID, State: state, CreatedAt: createdAt,
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt}}
}

func pods(sbs []*runtimeapi.PodSandbox, cs []*runtimeapi.Container) *runtimePods {
	p := &runtimePods{sandboxes: sbs, containers: cs, sandboxUID: map[string]types.UID{},
		readyUIDs: map[types.UID]bool{}, runningUIDs: map[types.UID]bool{}}
	for _, sb := range sbs {
		p.sandboxUID[sb.Id] = types.UID(sb.Metadata.Uid)
		if sb.State == ready {
			p.readyUIDs[types.UID(sb.Metadata.Uid)] = true
		}
	}
	for _, c := range cs {
		if c.State == running {
			p.runningUIDs[p.podUID(c)] = true
		}
	}
	return p
}

func ids[T interface{ GetId() string }](items []T) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, it.GetId())
	}
	sort.Strings(out)
	return out
}

func TestPlanContainerGC(t *testing.T) {
	tests := []struct {
		name           string
		sandboxes      []*runtimeapi.PodSandbox
		containers     []*runtimeapi.Container
		live           LivePods
		wantContainers []string
		wantSandboxes  []string
	}{{
		name:      "live pod keeps the newest dead instance of each container",
		sandboxes: []*runtimeapi.PodSandbox{sandbox("sb1", "a", ready, 1)},
		containers: []*runtimeapi.Container{
			container("app0", "sb1", "app", 0, exited, 10),
			container("app1", "sb1", "app", 1, exited, 20),
			container("app2", "sb1", "app", 2, running, 30),
			container("init0", "sb1", "init", 0, exited, 5),
		},
		live:           sets.New[types.UID]("a"),
		wantContainers: []string{"app0"},
	}, {
		name:      "attempt beats creation time when choosing the newest",
		sandboxes: []*runtimeapi.PodSandbox{sandbox("sb1", "a", ready, 1)},
		containers: []*runtimeapi.Container{
			container("app0", "sb1", "app", 0, exited, 50),
			container("app1", "sb1", "app", 1, exited, 20),
		},
		live:           sets.New[types.UID]("a"),
		wantContainers: []string{"app0"},
	}, {
		name:      "gone pod loses every non-running container and its stopped sandbox",
		sandboxes: []*runtimeapi.PodSandbox{sandbox("sb1", "gone", unready, 1)},
		containers: []*runtimeapi.Container{
			container("app0", "sb1", "app", 0, exited, 10),
			container("side0", "sb1", "side", 0, created, 11),
		},
		live:           sets.New[types.UID](),
		wantContainers: []string{"app0", "side0"},
		wantSandboxes:  []string{"sb1"},
	}, {
		name:      "gone pod with a running container keeps the container and the sandbox",
		sandboxes: []*runtimeapi.PodSandbox{sandbox("sb1", "gone", unready, 1)},
		containers: []*runtimeapi.Container{
			container("app0", "sb1", "app", 0, exited, 10),
			container("app1", "sb1", "app", 1, running, 20),
		},
		live:           sets.New[types.UID](),
		wantContainers: []string{"app0"},
	}, {
		name:      "pod missing from the live set but with a ready sandbox is not gone",
		sandboxes: []*runtimeapi.PodSandbox{sandbox("sb1", "lag", ready, 1)},
		containers: []*runtimeapi.Container{
			container("init0", "sb1", "init", 0, exited, 10),
		},
		live: sets.New[types.UID](),
	}, {
		name:      "unknown live set: only older instances go, no pod is gone",
		sandboxes: []*runtimeapi.PodSandbox{sandbox("sb1", "gone", unready, 1)},
		containers: []*runtimeapi.Container{
			container("app0", "sb1", "app", 0, exited, 10),
			container("app1", "sb1", "app", 1, exited, 20),
		},
		live:           nil,
		wantContainers: []string{"app0"},
	}, {
		name: "live pod: older not-ready sandboxes without containers go, the newest stays",
		sandboxes: []*runtimeapi.PodSandbox{
			sandbox("old", "a", unready, 1), sandbox("older", "a", unready, 0), sandbox("new", "a", unready, 5),
		},
		containers: []*runtimeapi.Container{container("app0", "older", "app", 0, exited, 2)},
		live:       sets.New[types.UID]("a"),
		// "older" still holds the newest dead instance of app: kept.
		wantSandboxes: []string{"old"},
	}, {
		name:       "created container of a live pod is being started: kept",
		sandboxes:  []*runtimeapi.PodSandbox{sandbox("sb1", "a", ready, 1)},
		containers: []*runtimeapi.Container{container("c", "sb1", "app", 1, created, 10), container("e", "sb1", "app", 0, exited, 5)},
		live:       sets.New[types.UID]("a"),
	}, {
		name:       "container the kubelet did not create is never touched",
		containers: []*runtimeapi.Container{container("x", "unknown-sandbox", "x", 0, exited, 1)},
		live:       sets.New[types.UID](),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := planContainerGC(pods(tt.sandboxes, tt.containers), tt.live)
			if got := ids(plan.containers); !slices.Equal(got, sortedOrEmpty(tt.wantContainers)) {
				t.Errorf("containers removed = %v, want %v", got, tt.wantContainers)
			}
			if got := ids(plan.sandboxes); !slices.Equal(got, sortedOrEmpty(tt.wantSandboxes)) {
				t.Errorf("sandboxes removed = %v, want %v", got, tt.wantSandboxes)
			}
		})
	}
}

func sortedOrEmpty(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func newTestReclaimer(t testing.TB, clock *clocktesting.FakeClock) *Reclaimer {
	t.Helper()
	r, err := New(Options{StateFile: filepath.Join(t.TempDir(), "state.json"), Clock: clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestImagesInEvictionOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(t0)
	r := newTestReclaimer(t, clock)
	img := func(id string, tags ...string) *runtimeapi.Image {
		return &runtimeapi.Image{Id: id, RepoTags: tags}
	}
	imgs := []*runtimeapi.Image{
		img("sha256:used", "x/used:1"),
		img("sha256:pinned-flag"),
		img("sha256:pinned-opt", "x/pinned:1"),
		img("sha256:young", "x/young:1"),
		img("sha256:lru-old", "x/old:1"),
		img("sha256:lru-mid", "x/mid:1"),
		img("sha256:never-used", "x/never:1"),
		img("sha256:tie-b"),
		img("sha256:tie-a"),
	}
	imgs[1].Pinned = true
	r.state.records = map[string]imageRecord{
		"sha256:used":        {FirstSeen: t0},
		"sha256:pinned-flag": {FirstSeen: t0},
		"sha256:pinned-opt":  {FirstSeen: t0},
		"sha256:young":       {FirstSeen: t0.Add(59 * time.Minute)},
		"sha256:lru-old":     {FirstSeen: t0, LastUsed: t0.Add(10 * time.Minute)},
		"sha256:lru-mid":     {FirstSeen: t0, LastUsed: t0.Add(20 * time.Minute)},
		"sha256:never-used":  {FirstSeen: t0.Add(5 * time.Minute)},
		"sha256:tie-b":       {FirstSeen: t0.Add(30 * time.Minute)},
		"sha256:tie-a":       {FirstSeen: t0.Add(30 * time.Minute)},
	}
	r.opts.ImageMinimumAge = 2 * time.Minute
	now := t0.Add(time.Hour)
	got := r.imagesInEvictionOrder(imgs, imagesInUse{"x/used:1": true}, newPinnedMatcher([]string{"x/pinned"}), now)
	var order []string
	for _, c := range got {
		order = append(order, c.img.Id)
	}
	want := []string{"sha256:never-used", "sha256:lru-old", "sha256:lru-mid", "sha256:tie-a", "sha256:tie-b"}
	if !slices.Equal(order, want) {
		t.Errorf("eviction order = %v, want %v", order, want)
	}
}

func TestPinnedMatcher(t *testing.T) {
	m := newPinnedMatcher([]string{"registry.k8s.io/pause", "example.test/app:v1", "sha256:abc", "localhost:5000/x", "repo@sha256:def"})
	tests := []struct {
		img  *runtimeapi.Image
		want bool
	}{
		{&runtimeapi.Image{Id: "sha256:1", RepoTags: []string{"registry.k8s.io/pause:3.10"}}, true},
		{&runtimeapi.Image{Id: "sha256:2", RepoTags: []string{"registry.k8s.io/pause-other:3.10"}}, false},
		{&runtimeapi.Image{Id: "sha256:3", RepoTags: []string{"example.test/app:v1"}}, true},
		{&runtimeapi.Image{Id: "sha256:4", RepoTags: []string{"example.test/app:v2"}}, false},
		{&runtimeapi.Image{Id: "sha256:abc"}, true},
		{&runtimeapi.Image{Id: "sha256:5", RepoTags: []string{"localhost:5000/x:latest"}}, true},
		{&runtimeapi.Image{Id: "sha256:6", RepoDigests: []string{"repo@sha256:def"}}, true},
		{&runtimeapi.Image{Id: "sha256:7", RepoDigests: []string{"registry.k8s.io/pause@sha256:9"}}, true},
		{&runtimeapi.Image{Id: "sha256:8", Pinned: true}, true},
	}
	for _, tt := range tests {
		if got := m.pins(tt.img); got != tt.want {
			t.Errorf("pins(%s %v %v) = %v, want %v", tt.img.Id, tt.img.RepoTags, tt.img.RepoDigests, got, tt.want)
		}
	}
}

func TestPodUIDFromLogDir(t *testing.T) {
	for name, want := range map[string]types.UID{
		"kube-system_coredns-abc_0c7f8e2a-1111-2222-3333-444455556666": "0c7f8e2a-1111-2222-3333-444455556666",
		"default_web_uid": "uid",
		"no-underscores":  "",
		"a_b":             "",
		"a_b_c_d":         "",
		"_b_c":            "",
	} {
		got, ok := podUIDFromLogDir(name)
		if got != want || ok != (want != "") {
			t.Errorf("podUIDFromLogDir(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestWithinDir(t *testing.T) {
	for _, tt := range []struct {
		dir, path string
		want      bool
	}{
		{"/var/log/pods", "/var/log/pods/ns_p_u/app/0.log", true},
		{"/var/log/pods", "/var/log/pods", false},
		{"/var/log/pods", "/var/log/pods/../../etc/passwd", false},
		{"/var/log/pods", "/var/log/podsx/a", false},
		{"/var/log/pods", "relative/a", false},
	} {
		if got := withinDir(tt.dir, tt.path); got != tt.want {
			t.Errorf("withinDir(%q, %q) = %v, want %v", tt.dir, tt.path, got, tt.want)
		}
	}
}

func TestImageStateSurvivesReloadAndIsWrittenAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "state.json")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	st, err := loadImageState(path, log)
	if err != nil {
		t.Fatal(err)
	}
	st.observe([]string{"sha256:a", "sha256:b"}, func(id string) bool { return id == "sha256:b" }, t0)
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	st.observe([]string{"sha256:a"}, func(string) bool { return false }, t0.Add(time.Hour))
	if err := st.save(); err != nil {
		t.Fatal(err)
	}

	again, err := loadImageState(path, log)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]imageRecord{"sha256:a": {FirstSeen: t0}}
	if len(again.records) != 1 || !again.records["sha256:a"].FirstSeen.Equal(t0) || !again.records["sha256:a"].LastUsed.IsZero() {
		t.Errorf("reloaded records = %+v, want %+v", again.records, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("state directory holds %d entries, want only the state file (no temporary left)", len(entries))
	}
}

func TestCorruptImageStateIsMovedAsideAndStartsEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := loadImageState(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("loadImageState: %v", err)
	}
	if len(st.records) != 0 {
		t.Errorf("records = %v, want empty", st.records)
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("corrupt file not kept aside: %v", aside)
	}
}

func TestRunRejectsUnknownStepAndNonDiskSignal(t *testing.T) {
	r := newTestReclaimer(t, clocktesting.NewFakeClock(time.Now()))
	if _, err := r.Run(t.Context(), Request{Step: "defrag"}); err == nil {
		t.Error("unknown step: no error")
	}
	_, err := r.filesystemFor(t.Context(), nil, Request{Step: policy.ReclaimPodLogs, Signal: policy.SignalMemoryAvailable})
	if err == nil {
		t.Error("memory signal: no error")
	}
}

func TestOptionsRejectEmptyPinnedEntry(t *testing.T) {
	_, err := New(Options{StateFile: filepath.Join(t.TempDir(), "s.json"), PinnedImages: []string{"a", ""}})
	if err == nil {
		t.Fatal("empty PinnedImages entry accepted")
	}
	if want := `PinnedImages[1] ""`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the field and value %s", err, want)
	}
}

// BenchmarkPlanContainerGC plans GC over a busy node: 300 pods, 3 containers each, 5 dead
// instances per container.
func BenchmarkPlanContainerGC(b *testing.B) {
	var sbs []*runtimeapi.PodSandbox
	var cs []*runtimeapi.Container
	live := sets.New[types.UID]()
	for p := range 300 {
		uid := fmt.Sprintf("uid-%d", p)
		sbID := "sb-" + uid
		state := ready
		if p%3 == 0 {
			state = unready
		} else {
			live.Insert(types.UID(uid))
		}
		sbs = append(sbs, sandbox(sbID, uid, state, int64(p)))
		for c := range 3 {
			for a := range 5 {
				cs = append(cs, container(fmt.Sprintf("%s-%d-%d", uid, c, a), sbID, fmt.Sprintf("c%d", c), uint32(a), exited, int64(a)))
			}
		}
	}
	rp := pods(sbs, cs)
	b.ReportAllocs()
	for b.Loop() {
		planContainerGC(rp, live)
	}
}

// BenchmarkImagesInEvictionOrder orders 1000 images.
func BenchmarkImagesInEvictionOrder(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newTestReclaimer(b, clocktesting.NewFakeClock(t0))
	var imgs []*runtimeapi.Image
	for i := range 1000 {
		id := fmt.Sprintf("sha256:%064d", i)
		imgs = append(imgs, &runtimeapi.Image{Id: id, RepoTags: []string{fmt.Sprintf("example.test/img-%d:v1", i)}})
		r.state.records[id] = imageRecord{FirstSeen: t0, LastUsed: t0.Add(time.Duration(i*7919%1000) * time.Second)}
	}
	used := imagesInUse{"example.test/img-1:v1": true}
	pinned := newPinnedMatcher([]string{"registry.k8s.io/pause"})
	b.ReportAllocs()
	for b.Loop() {
		r.imagesInEvictionOrder(imgs, used, pinned, t0.Add(time.Hour))
	}
}

func TestResultEventMessage(t *testing.T) {
	for _, tt := range []struct {
		res  Result
		want string
	}{
		{Result{Step: policy.ReclaimImageGC, Unit: "bytes", Filesystem: "/var/lib/containerd", Freed: 41 << 20, ItemsRemoved: 2},
			"imageGC freed 41MiB on /var/lib/containerd (2 removed)"},
		{Result{Step: policy.ReclaimPodLogs, Unit: "inodes", Filesystem: "/var/lib/kubelet", Freed: 120, ItemsRemoved: 3, Errors: []error{ErrLivePodsUnknown}},
			"podLogs freed 120 inodes on /var/lib/kubelet (3 removed, 1 errors)"},
		{Result{Step: policy.ReclaimContainerGC, Unit: "bytes", Filesystem: "/x", WouldRemove: 4},
			"containerGC freed 0B on /x (0 removed, 4 would be removed: dry run)"},
	} {
		if got := tt.res.EventMessage(); got != tt.want {
			t.Errorf("EventMessage() = %q, want %q", got, tt.want)
		}
	}
}

func TestImageStateWritesLastUsedAtMostOncePerGranularity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st, err := loadImageState(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inUse := func(string) bool { return true }
	st.observe([]string{"sha256:a"}, inUse, t0)
	if !st.dirty {
		t.Fatal("new image did not mark the state for writing")
	}
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	for s := 1; s < 60; s++ {
		st.observe([]string{"sha256:a"}, inUse, t0.Add(time.Duration(s)*time.Second))
		if st.dirty {
			t.Fatalf("last-used moved by %ds marked the state for writing", s)
		}
	}
	st.observe([]string{"sha256:a"}, inUse, t0.Add(time.Minute))
	if !st.dirty {
		t.Fatal("last-used moved by a minute did not mark the state for writing")
	}
	if got := st.records["sha256:a"].LastUsed; !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("in-memory last-used = %v, want the latest observation", got)
	}
}

func TestLivePodsFromPodsIncludesStaticPodUIDs(t *testing.T) {
	regular := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "api-uid"}}
	mirror := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "mirror-uid",
		Annotations: map[string]string{"kubernetes.io/config.mirror": "static-hash"}}}
	live := LivePodsFromPods([]*v1.Pod{regular, mirror, nil})
	if want := sets.New[types.UID]("api-uid", "mirror-uid", "static-hash"); !live.Equal(want) {
		t.Errorf("live = %v, want %v", sets.List(live), sets.List(want))
	}
	if empty := LivePodsFromPods(nil); empty == nil || empty.Len() != 0 {
		t.Errorf("no pods: got %v, want an empty, non-nil set (a known, empty node)", empty)
	}
}
