package confine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The proofs run in a child process (the test binary again): a seccomp filter
// and a dropped capability cannot be undone, and would confine the test run.
const childEnv = "EVICTIOND_CONFINE_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// childResult is what a child saw, per thread: "pre" is a thread that existed
// before the control was applied (a goroutine locked to it), "main" the
// goroutine that applied it.
type childResult struct {
	Err     string            `json:"err,omitempty"`
	Calls   map[string]string `json:"calls"`
	Threads []ThreadStatus    `json:"threads"`
	Report  []string          `json:"report,omitempty"`
}

func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// onThread runs fn on a thread that exists from now on, for as long as the
// returned function is not called with nil.
func lockedThread() (run func(func()), stop func()) {
	work := make(chan func())
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		for fn := range work {
			fn()
			done <- struct{}{}
		}
	}()
	return func(fn func()) { work <- fn; <-done }, func() { close(work) }
}

func child(mode string) int {
	res := childResult{Calls: map[string]string{}}
	out := func() int {
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return 0
	}
	fail := func(err error) int { res.Err = err.Error(); return out() }

	pre, stop := lockedThread()
	defer stop()

	switch mode {
	case "seccomp-none", "seccomp":
		dir := os.Getenv("EVICTIOND_CONFINE_DIR")
		path := filepath.Join(dir, "file")
		// The handle is taken before the filter, which refuses name_to_handle_at too.
		h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
		if err != nil {
			return fail(fmt.Errorf("name_to_handle_at %s before any filter: %w", path, err))
		}
		mount, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return fail(err)
		}
		if mode == "seccomp" {
			if _, err := InstallSeccomp(); err != nil {
				return fail(err)
			}
		}
		try := func(name string) {
			fd, err := unix.OpenByHandleAt(mount, h, unix.O_RDWR)
			if err == nil {
				unix.Close(fd)
			}
			res.Calls["open_by_handle_at/"+name] = errnoName(err)
			_, _, err = unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
			res.Calls["name_to_handle_at/"+name] = errnoName(err)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err == nil {
				f.Close()
			}
			res.Calls["open/"+name] = errnoName(err)
		}
		try("main")
		pre(func() { try("pre") })
	case "capkill-none", "capkill":
		pid, err := strconv.Atoi(os.Getenv("EVICTIOND_CONFINE_TARGET"))
		if err != nil {
			return fail(err)
		}
		if mode == "capkill" {
			if _, err := DropCapKill(); err != nil {
				return fail(err)
			}
		}
		try := func(name string) {
			res.Calls["kill/"+name] = errnoName(unix.Kill(pid, 0))
		}
		try("main")
		pre(func() { try("pre") })
	case "apply":
		for _, o := range Apply(os.Getenv("EVICTIOND_CONFINE_CGROUP")) {
			res.Report = append(res.Report, fmt.Sprintf("%s applied=%t err=%v", o.Control, o.Applied, o.Err))
		}
	default:
		return fail(fmt.Errorf("unknown mode %q", mode))
	}
	threads, err := Threads("/proc/self")
	if err != nil {
		return fail(err)
	}
	res.Threads = threads
	return out()
}

func runChild(t *testing.T, mode string, env ...string) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, childEnv+"="+mode)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", mode, err, out)
	}
	var res childResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child %s: %v: %s", mode, err, out)
	}
	if res.Err != "" {
		t.Fatalf("child %s: %s", mode, res.Err)
	}
	if len(res.Threads) < 2 {
		t.Fatalf("child %s ran %d threads; the proof needs more than the one that applied the control", mode, len(res.Threads))
	}
	return res
}

// requireCap fails (not skips) when the test process lacks the capability the
// unconfined control call needs: without it the call fails unconfined too,
// and the comparison proves nothing.
func requireCap(t *testing.T, bit uint, name string) {
	t.Helper()
	th, err := Threads("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if th[0].CapEff&(1<<bit) == 0 {
		t.Fatalf("this test runs as root with %s (CapEff %016x): without it the unconfined call is refused too", name, th[0].CapEff)
	}
}

func TestSeccomp_OpenByHandleAtRefusedOnEveryThread(t *testing.T) {
	requireCap(t, unix.CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := "EVICTIOND_CONFINE_DIR=" + dir

	// Unconfined, the same calls succeed: what the filter takes away.
	none := runChild(t, "seccomp-none", env)
	for _, th := range []string{"main", "pre"} {
		for _, call := range []string{"open_by_handle_at", "name_to_handle_at", "open"} {
			if got := none.Calls[call+"/"+th]; got != "ok" {
				t.Errorf("unconfined, %s on the %s thread: %s, want ok", call, th, got)
			}
		}
	}

	conf := runChild(t, "seccomp", env)
	for _, th := range []string{"main", "pre"} {
		for call, want := range map[string]string{"open_by_handle_at": "EPERM", "name_to_handle_at": "EPERM", "open": "ok"} {
			if got := conf.Calls[call+"/"+th]; got != want {
				t.Errorf("confined, %s on the %s thread: %s, want %s", call, th, got, want)
			}
		}
	}
	for _, th := range conf.Threads {
		if th.Seccomp != unix.SECCOMP_MODE_FILTER || !th.NoNewPrivs {
			t.Errorf("confined thread %d: Seccomp %d NoNewPrivs %t, want 2 and true", th.TID, th.Seccomp, th.NoNewPrivs)
		}
	}
}

func TestCapKill_DroppedOnEveryThread(t *testing.T) {
	requireCap(t, unix.CAP_KILL, "CAP_KILL")
	// A process of another user: signalling it needs CAP_KILL.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("this test runs sleep(1) as another user: %v", err)
	}
	target := exec.Command(sleep, "600")
	target.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Process.Kill(); _ = target.Wait() })
	env := "EVICTIOND_CONFINE_TARGET=" + strconv.Itoa(target.Process.Pid)

	none := runChild(t, "capkill-none", env)
	for _, th := range []string{"main", "pre"} {
		if got := none.Calls["kill/"+th]; got != "ok" {
			t.Errorf("with CAP_KILL, kill(uid 65534's process, 0) on the %s thread: %s, want ok", th, got)
		}
	}
	for _, th := range none.Threads {
		if !th.HoldsCapKill() {
			t.Errorf("unconfined thread %d lacks CAP_KILL (CapEff %016x)", th.TID, th.CapEff)
		}
	}

	conf := runChild(t, "capkill", env)
	for _, th := range []string{"main", "pre"} {
		if got := conf.Calls["kill/"+th]; got != "EPERM" {
			t.Errorf("CAP_KILL dropped, kill(uid 65534's process, 0) on the %s thread: %s, want EPERM", th, got)
		}
	}
	for _, th := range conf.Threads {
		if th.HoldsCapKill() {
			t.Errorf("thread %d still holds CAP_KILL: CapEff %016x CapPrm %016x CapInh %016x", th.TID, th.CapEff, th.CapPrm, th.CapInh)
		}
		if th.CapEff&(1<<unix.CAP_DAC_READ_SEARCH) == 0 {
			t.Errorf("thread %d lost CAP_DAC_READ_SEARCH too (CapEff %016x): only CAP_KILL is dropped", th.TID, th.CapEff)
		}
	}
}

// On this machine (cgroup v1) Apply installs the filter and keeps CAP_KILL.
func TestApply_CgroupV1KeepsCapKill(t *testing.T) {
	mount := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(mount, "memory")); err != nil {
		t.Fatalf("this test needs a cgroup v1 host (%s/memory): %v", mount, err)
	}
	res := runChild(t, "apply", "EVICTIOND_CONFINE_CGROUP="+mount)
	want := []string{"seccomp applied=true err=<nil>", "cap_kill applied=false err=<nil>"}
	if strings.Join(res.Report, "\n") != strings.Join(want, "\n") {
		t.Errorf("report:\n%s\nwant:\n%s", strings.Join(res.Report, "\n"), strings.Join(want, "\n"))
	}
	for _, th := range res.Threads {
		if !th.HoldsCapKill() {
			t.Errorf("thread %d lost CAP_KILL on cgroup v1", th.TID)
		}
	}
}

func TestCapKillNeeded(t *testing.T) {
	mk := func(t *testing.T, files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name   string
		files  []string
		needed bool
		says   string
	}{
		{"v1", []string{"memory/memory.limit_in_bytes"}, true, "not cgroup v2"},
		{"v2 with cgroup.kill", []string{"cgroup.controllers", "kubepods.slice/cgroup.kill"}, false, "cgroup v2 with cgroup.kill"},
		{"v2 before 5.14", []string{"cgroup.controllers", "kubepods.slice/cgroup.procs"}, true, "without cgroup.kill"},
		{"v2 no child", []string{"cgroup.controllers"}, true, "no child cgroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needed, why := CapKillNeeded(mk(t, tc.files...))
			if needed != tc.needed || !strings.Contains(why, tc.says) {
				t.Errorf("CapKillNeeded = %t, %q; want %t, saying %q", needed, why, tc.needed, tc.says)
			}
		})
	}
}

// The filter, run on the BPF interpreter for each architecture the image is
// built for. x/net/bpf loads words big-endian; the kernel loads seccomp_data
// in the machine's order, so the data is laid out big-endian here.
func TestFilter_EachArchitecture(t *testing.T) {
	data := func(nr, arch uint32) []byte {
		b := make([]byte, 64)
		binary.BigEndian.PutUint32(b[offNR:], nr)
		binary.BigEndian.PutUint32(b[offArch:], arch)
		return b
	}
	type call struct {
		name     string
		nr, arch uint32
		want     uint32
	}
	cases := map[string][]call{
		"amd64": {
			{"open_by_handle_at", 304, unix.AUDIT_ARCH_X86_64, retEPERM},
			{"name_to_handle_at", 303, unix.AUDIT_ARCH_X86_64, retEPERM},
			{"openat", 257, unix.AUDIT_ARCH_X86_64, retAllow},
			{"kill", 62, unix.AUDIT_ARCH_X86_64, retAllow},
			{"x32 open_by_handle_at", 0x40000000 | 304, unix.AUDIT_ARCH_X86_64, retEPERM},
			{"i386 open_by_handle_at (int 0x80)", 342, unix.AUDIT_ARCH_I386, retEPERM},
			{"i386 read", 3, unix.AUDIT_ARCH_I386, retEPERM},
		},
		"arm64": {
			{"open_by_handle_at", 265, unix.AUDIT_ARCH_AARCH64, retEPERM},
			{"name_to_handle_at", 264, unix.AUDIT_ARCH_AARCH64, retEPERM},
			{"openat", 56, unix.AUDIT_ARCH_AARCH64, retAllow},
			{"kill", 129, unix.AUDIT_ARCH_AARCH64, retAllow},
			{"304 is not special on arm64", 304, unix.AUDIT_ARCH_AARCH64, retAllow},
			{"arm32 open_by_handle_at", 371, unix.AUDIT_ARCH_ARM, retEPERM},
		},
	}
	if len(cases) != len(abis) {
		t.Fatalf("cases for %d architectures, filters for %d", len(cases), len(abis))
	}
	for arch, calls := range cases {
		prog, err := filter(arch)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		for _, c := range calls {
			got, err := vm.Run(data(c.nr, c.arch))
			if err != nil {
				t.Fatalf("%s %s: %v", arch, c.name, err)
			}
			if uint32(got) != c.want {
				t.Errorf("%s %s: %#x, want %#x", arch, c.name, got, c.want)
			}
		}
	}
	if _, err := filter("riscv64"); err == nil || !strings.Contains(err.Error(), "riscv64") {
		t.Errorf("filter(riscv64): %v, want an error naming the architecture", err)
	}
}

// The table's numbers are the kernel's for the architecture the tests run on.
func TestFilter_NumbersMatchXSys(t *testing.T) {
	a, ok := abis[runtime.GOARCH]
	if !ok {
		t.Fatalf("no filter for %s", runtime.GOARCH)
	}
	if a.openByHandleAt != unix.SYS_OPEN_BY_HANDLE_AT || a.nameToHandleAt != unix.SYS_NAME_TO_HANDLE_AT {
		t.Errorf("%s: open_by_handle_at %d name_to_handle_at %d, x/sys says %d and %d", runtime.GOARCH,
			a.openByHandleAt, a.nameToHandleAt, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT)
	}
}

func TestParseStatus(t *testing.T) {
	st, err := ParseStatus("Name:\tevictiond\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\nCapInh:\t0000000000000000\nCapPrm:\t0000000001000024\nCapEff:\t0000000001000024\nCapBnd:\t0000000001000024\n")
	if err != nil {
		t.Fatal(err)
	}
	if st.Seccomp != 2 || st.SeccompFilters != 2 || !st.NoNewPrivs || st.CapEff != 0x1000024 || !st.HoldsCapKill() {
		t.Errorf("%+v", st)
	}
	if _, err := ParseStatus("CapEff:\tzz\nSeccomp:\t0\n"); err == nil || !strings.Contains(err.Error(), `CapEff: value "zz"`) {
		t.Errorf("bad CapEff: %v", err)
	}
}
