package brake

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"k8s.io/apimachinery/pkg/types"
)

// The kernel's freezer semantics are proven on the real v1 hierarchy
// (cgroupv1_integration_test.go); these tests cover the refusals and the
// holds' bookkeeping on a fake cgroupfs (opencontainers/cgroups' TestMode:
// a written state reads back as written).

func fakeV1(t *testing.T) PodCgroup {
	t.Helper()
	cgroups.TestMode = true
	t.Cleanup(func() { cgroups.TestMode = false })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.self_freezing"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return PodCgroup{Version: V1, Dir: dir}
}

func state(t *testing.T, cg PodCgroup) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.Dir, "freezer.state"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestPodCgroup_Refusals(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		cg   PodCgroup
		want string
	}{
		{PodCgroup{Version: 3, Dir: dir}, "version 3: must be 1 or 2"},
		{PodCgroup{Version: V1, Dir: "kubepods/pod1"}, `dir "kubepods/pod1": must be an absolute path`},
		{PodCgroup{Version: V1, Dir: dir}, "no freezer.state (is the freezer controller mounted and the pod cgroup there?)"},
		{PodCgroup{Version: V2, Dir: dir}, "no cgroup.freeze"},
	}
	for _, tc := range cases {
		for name, op := range map[string]func() error{
			"Freeze": tc.cg.Freeze, "Thaw": tc.cg.Thaw,
			"Kill":   func() error { _, err := tc.cg.Kill(time.Second); return err },
			"Frozen": func() error { _, err := tc.cg.Frozen(); return err },
		} {
			if err := op(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s on %+v: error %v, want it to say %q", name, tc.cg, err, tc.want)
			}
		}
	}
}

func TestBrake_FreezeRefusals(t *testing.T) {
	b := New(nil)
	cg := fakeV1(t)
	if _, err := b.Freeze("", "ns/p", cg, time.Second); err == nil || !strings.Contains(err.Error(), "UID is empty") {
		t.Errorf("empty UID: %v", err)
	}
	if _, err := b.Freeze("u", "ns/p", cg, 0); err == nil || !strings.Contains(err.Error(), "maxFreeze 0s: must be positive") {
		t.Errorf("zero maxFreeze: %v", err)
	}
	if _, err := b.Freeze("u", "ns/p", PodCgroup{Version: V1, Dir: t.TempDir()}, time.Second); err == nil {
		t.Error("freezing a directory without freezer.state succeeded")
	}
	if len(b.Held()) != 0 {
		t.Errorf("a refused freeze left a hold: %+v", b.Held())
	}
}

func TestBrake_HoldThawAndDoubleFreeze(t *testing.T) {
	b := New(func(Hold, error) { t.Error("no hold should expire in this test") })
	cg := fakeV1(t)
	h, err := b.Freeze("u1", "ns/p", cg, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if state(t, cg) != "FROZEN" || h.UID != "u1" || h.Pod != "ns/p" || h.Deadline.Sub(h.FrozenAt) != time.Hour {
		t.Fatalf("after Freeze: state %s, hold %+v", state(t, cg), h)
	}
	again, err := b.Freeze("u1", "ns/p", cg, time.Minute)
	if err != nil || again.Deadline != h.Deadline {
		t.Errorf("a second Freeze of a held pod: %v, deadline %v, want the first hold's %v", err, again.Deadline, h.Deadline)
	}
	if got := b.Held(); len(got) != 1 || got[0].UID != "u1" {
		t.Errorf("Held() = %+v", got)
	}
	if _, ok, err := b.Thaw("other"); ok || err != nil {
		t.Errorf("Thaw of a pod not held: ok %v err %v", ok, err)
	}
	if _, ok, err := b.Thaw("u1"); !ok || err != nil || state(t, cg) != "THAWED" {
		t.Errorf("Thaw: ok %v err %v state %s", ok, err, state(t, cg))
	}
	if _, _, ok, _ := b.Kill("u1", time.Second); ok {
		t.Error("Kill after Thaw found a hold: a thawed pod must not be killed by the brake")
	}
}

func TestBrake_HoldExpires(t *testing.T) {
	expired := make(chan Hold, 1)
	b := New(func(h Hold, err error) {
		if err != nil {
			t.Errorf("thaw at the deadline: %v", err)
		}
		expired <- h
	})
	cg := fakeV1(t)
	if _, err := b.Freeze("u1", "ns/p", cg, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-expired:
		if h.UID != "u1" {
			t.Errorf("expired %+v", h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hold did not expire")
	}
	if state(t, cg) != "THAWED" || len(b.Held()) != 0 {
		t.Errorf("after expiry: state %s, holds %+v", state(t, cg), b.Held())
	}
}

func TestBrake_ThawAll(t *testing.T) {
	b := New(nil)
	a, c := fakeV1(t), fakeV1(t)
	for uid, cg := range map[string]PodCgroup{"a": a, "c": c} {
		if _, err := b.Freeze(types.UID(uid), "ns/"+uid, cg, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if errs := b.ThawAll(); len(errs) != 0 {
		t.Fatal(errs)
	}
	if state(t, a) != "THAWED" || state(t, c) != "THAWED" || len(b.Held()) != 0 {
		t.Errorf("after ThawAll: %s %s %+v", state(t, a), state(t, c), b.Held())
	}
}

// A container cgroup the runtime removes while the brake lists the pod's
// processes (its cgroup.procs gone, or answering ENODEV) has none left: the
// listing goes on with the others instead of failing the kill.
func TestPodCgroup_PidsSkipsAContainerCgroupBeingRemoved(t *testing.T) {
	dir := fakeV1(t).Dir
	for path, procs := range map[string]string{"cgroup.procs": "", "app/cgroup.procs": "41\n42\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(procs), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "exited"), 0o755); err != nil { // removed: no cgroup.procs
		t.Fatal(err)
	}
	pids, err := PodCgroup{Version: V1, Dir: dir}.Pids()
	if err != nil || len(pids) != 2 || pids[0]+pids[1] != 83 {
		t.Fatalf("Pids = %v, %v; want [41 42] with the vanished container skipped", pids, err)
	}
	if !vanished(&fs.PathError{Op: "read", Path: "x/cgroup.procs", Err: syscall.ENODEV}) {
		t.Error("ENODEV (a cgroup being destroyed) not taken as vanished")
	}
	if _, err := (PodCgroup{Version: V1, Dir: filepath.Join(dir, "nope")}).Pids(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the pod's own cgroup gone: err %v, want not-exist (the runtime removed it)", err)
	}
}
