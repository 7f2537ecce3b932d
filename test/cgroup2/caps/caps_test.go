//go:build integration && cgroup2

package caps

// Run by make test-cgroup2 in the VM (suite "caps" of test/cgroup2), as root
// with every capability: the parent sets up what a node has (a kubepods
// cgroup, a pod's emptyDir written by uid 1000, a frozen pod whose task runs
// as uid 1000) and runs the agent's code on it in a child with exactly the
// shipped capabilities, then with one of them missing.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/notify"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/testenv/vm"
)

// The child's environment.
const (
	stageEnv = "EVICTIOND_CAPS_STAGE" // "drop", then "run" after the re-exec
	setEnv   = "EVICTIOND_CAPS_SET"   // the capability mask, hex
	jobEnv   = "EVICTIOND_CAPS_JOB"   // the job, JSON
)

// otherUID is the pods' user: not root, as a pod with runAsUser 1000.
const otherUID = 1000

const v2Mount = "/sys/fs/cgroup"

// job is what the child runs with the agent's code.
type job struct {
	Kind string // "psi", "du" or "kill"
	// psi: the kubepods cgroup's name at the root of the unified hierarchy.
	Kubepods string `json:",omitempty"`
	// du: the kubelet root and pod log directories, and the pod.
	KubeletRoot string    `json:",omitempty"`
	PodLogs     string    `json:",omitempty"`
	PodUID      types.UID `json:",omitempty"`
	// kill: the pod's cgroup.
	Version int    `json:",omitempty"`
	Dir     string `json:",omitempty"`
}

type volume struct{ Bytes, Inodes int64 }

// result is what the child reports on its stdout.
type result struct {
	// Err is the harness' own failure (capabilities not as asked, a job
	// that could not start): the test fails on it.
	Err string `json:",omitempty"`
	// Status is the child's /proc/self/status capability lines.
	Status string

	// Warnings the agent's code logged.
	Warnings []string `json:",omitempty"`

	PSI          []notify.NotifierStatus `json:",omitempty"`
	PSIFallbacks float64                 // evictiond_notifier_fallback_total{notifier="psi",reason="arm_failed"}

	Volumes  map[string]volume `json:",omitempty"`
	PodError string            `json:",omitempty"`

	FreezeErr   string `json:",omitempty"`
	Killed      int
	KillErr     string `json:",omitempty"`
	FrozenAfter bool
}

func TestMain(m *testing.M) {
	switch os.Getenv(stageEnv) {
	case "":
		os.Exit(m.Run())
	case "drop":
		report(dropAndExec()) // returns only when the exec failed
	case "run":
		report(runJob())
	default:
		report(result{Err: fmt.Sprintf("%s=%q", stageEnv, os.Getenv(stageEnv))})
	}
}

func report(r result) {
	_ = json.NewEncoder(os.Stdout).Encode(r)
	os.Exit(0)
}

// dropAndExec gives this thread the container's credentials, as runc does
// before it executes the container's process: no_new_privs, the bounding set
// reduced to the set, the ambient and inheritable sets emptied, permitted and
// effective the set. Then it executes the binary again as uid 0: the kernel
// computes the new sets from the bounding set (for uid 0, permitted =
// effective = bounding), exactly as for the agent in its container.
func dropAndExec() result {
	mask, err := strconv.ParseUint(os.Getenv(setEnv), 16, 64)
	if err != nil {
		return result{Err: fmt.Sprintf("%s: %v", setEnv, err)}
	}
	runtime.LockOSThread() // credentials are per thread; execve uses this one's
	lastData, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return result{Err: err.Error()}
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(lastData)))
	if err != nil {
		return result{Err: fmt.Sprintf("cap_last_cap %q: %v", lastData, err)}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return result{Err: fmt.Sprintf("PR_SET_NO_NEW_PRIVS: %v", err)}
	}
	for c := 0; c <= last; c++ {
		if mask&(1<<uint(c)) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return result{Err: fmt.Sprintf("PR_CAPBSET_DROP %d: %v", c, err)}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return result{Err: fmt.Sprintf("PR_CAP_AMBIENT_CLEAR_ALL: %v", err)}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective, data[0].Permitted = uint32(mask), uint32(mask)
	data[1].Effective, data[1].Permitted = uint32(mask>>32), uint32(mask>>32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return result{Err: fmt.Sprintf("capset %#x: %v", mask, err)}
	}
	exe, err := os.Executable()
	if err != nil {
		return result{Err: err.Error()}
	}
	env := append([]string{stageEnv + "=run"}, withoutVar(os.Environ(), stageEnv)...)
	err = unix.Exec(exe, os.Args, env)
	return result{Err: fmt.Sprintf("exec %s: %v", exe, err)}
}

func withoutVar(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// runJob checks the credentials the exec gave, then runs the job.
func runJob() result {
	mask, err := strconv.ParseUint(os.Getenv(setEnv), 16, 64)
	if err != nil {
		return result{Err: fmt.Sprintf("%s: %v", setEnv, err)}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return result{Err: err.Error()}
	}
	var lines []string
	want := map[string]string{
		"Uid": "0\t0\t0\t0", "Gid": "0\t0\t0\t0", "NoNewPrivs": "1",
		"CapInh": fmt.Sprintf("%016x", 0), "CapAmb": fmt.Sprintf("%016x", 0),
		"CapPrm": fmt.Sprintf("%016x", mask), "CapEff": fmt.Sprintf("%016x", mask), "CapBnd": fmt.Sprintf("%016x", mask),
	}
	var wrong []string
	for _, line := range strings.Split(string(status), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if w, ok := want[key]; ok {
			lines = append(lines, key+": "+value)
			if value != w {
				wrong = append(wrong, fmt.Sprintf("%s %q, want %q", key, value, w))
			}
			delete(want, key)
		}
	}
	for key := range want {
		wrong = append(wrong, key+" missing")
	}
	r := result{Status: strings.Join(lines, ", ")}
	if len(wrong) > 0 {
		r.Err = "the child's credentials are not the container's: " + strings.Join(wrong, "; ")
		return r
	}
	var j job
	if err := json.Unmarshal([]byte(os.Getenv(jobEnv)), &j); err != nil {
		r.Err = fmt.Sprintf("%s: %v", jobEnv, err)
		return r
	}
	switch j.Kind {
	case "psi":
		psiJob(j, &r)
	case "du":
		duJob(j, &r)
	case "kill":
		killJob(j, &r)
	default:
		r.Err = fmt.Sprintf("job kind %q", j.Kind)
	}
	return r
}

// childLogger logs to stderr (the parent shows it when a test fails) and
// keeps the warnings for the result.
func childLogger(r *result) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, warnings{r}), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type warnings struct{ r *result }

func (w warnings) Write(p []byte) (int, error) {
	if line := strings.TrimSpace(string(p)); strings.Contains(line, "level=WARN") {
		w.r.Warnings = append(w.r.Warnings, line)
	}
	return len(p), nil
}

// psiJob arms the notifier's PSI triggers, as the daemon does, with a 500 ms
// window on /proc/pressure/memory and the kubepods cgroup's memory.pressure.
func psiJob(j job, r *result) {
	metrics := notify.NewMetrics()
	m, err := notify.New(notify.Options{
		Mode: notify.CgroupModeV2, KubepodsCgroup: j.Kubepods,
		PSI:    notify.PSIOptions{Enabled: true, Type: notify.PSISome, Stall: 50 * time.Millisecond, Window: 500 * time.Millisecond},
		Logger: childLogger(r), Metrics: metrics,
	}, notify.NewWaker())
	if err != nil {
		r.Err = err.Error()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-m.Armed():
	case <-time.After(10 * time.Second):
		r.Err = "the notifiers made no arming attempt within 10s"
		return
	}
	for _, n := range m.Status().Notifiers {
		if n.Source == notify.SourcePSI {
			r.PSI = append(r.PSI, n)
		}
	}
	r.PSIFallbacks = testutil.ToFloat64(metrics.Fallbacks.WithLabelValues(string(notify.SourcePSI), notify.ReasonArmFailed))
}

// duJob measures the pod's disk usage through the monitor, as a pass of the
// loop does (ObservePodDisk: logs and local volumes).
func duJob(j job, r *result) {
	m, err := monitor.New(monitor.Config{
		KubeletRootDir: j.KubeletRoot, PodLogsDir: j.PodLogs, ImageFsDir: j.KubeletRoot,
		DisableCAdvisor: true, Logger: childLogger(r),
	})
	if err != nil {
		r.Err = err.Error()
		return
	}
	s := &monitor.Snapshot{Pods: policy.PodStatsByUID{}, PodErrors: map[types.UID]string{}}
	m.ObservePodDisk(context.Background(), s, []monitor.PodRef{{UID: j.PodUID, Namespace: "caps", Name: "writer"}})
	r.Volumes = map[string]volume{}
	for name, v := range s.Pods[j.PodUID].Volumes {
		if v.UsedBytes == nil || v.InodesUsed == nil {
			r.Err = fmt.Sprintf("volume %s measured without bytes or inodes: %+v", name, v)
			return
		}
		r.Volumes[name] = volume{Bytes: *v.UsedBytes, Inodes: *v.InodesUsed}
	}
	r.PodError = s.PodErrors[j.PodUID]
}

// killJob holds the pod with the brake and kills it, as the agent does once
// the eviction of a frozen pod is accepted (internal/agent killHeld).
func killJob(j job, r *result) {
	cg := brake.PodCgroup{Version: brake.Version(j.Version), Dir: j.Dir}
	b := brake.New(nil)
	uid := types.UID("caps-kill")
	if _, err := b.Freeze(uid, "caps/victim", cg, 30*time.Second); err != nil {
		r.FreezeErr = err.Error()
		return
	}
	_, n, _, err := b.Kill(uid, 2*time.Second)
	r.Killed = n
	if err != nil {
		r.KillErr = err.Error()
	}
	frozen, err := cg.Frozen()
	if err != nil {
		r.Err = err.Error()
	}
	r.FrozenAfter = frozen
}

// run runs the job in a child with exactly the capabilities set.
func run(t *testing.T, set []Capability, j job) result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	jobJSON, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(withoutVar(withoutVar(withoutVar(os.Environ(), stageEnv), setEnv), jobEnv),
		stageEnv+"=drop", fmt.Sprintf("%s=%x", setEnv, Mask(set)), jobEnv+"="+string(jobJSON))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("child %s (%v): no result on its stdout (%v): %q\nstderr:\n%s", j.Kind, runErr, err, stdout.String(), stderr.String())
	}
	if r.Err != "" {
		t.Fatalf("child %s: %s (credentials %s)\nstderr:\n%s", j.Kind, r.Err, r.Status, stderr.String())
	}
	t.Logf("child with %s ran %s in %v (%s)", names(set), j.Kind, took.Round(time.Millisecond), r.Status)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the child's log:\n%s", stderr.String())
		}
	})
	return r
}

func names(set []Capability) string {
	var n []string
	for _, c := range set {
		n = append(n, "CAP_"+c.Name)
	}
	return "[" + strings.Join(n, " ") + "]"
}

// kernelRelease is the running kernel's release, for the log.
func kernelRelease(t *testing.T) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

func psiStatus(t *testing.T, r result, target string) notify.NotifierStatus {
	t.Helper()
	for _, n := range r.PSI {
		if n.Target == target {
			return n
		}
	}
	t.Fatalf("no PSI notifier status for %s in %+v", target, r.PSI)
	return notify.NotifierStatus{}
}

// CAP_SYS_RESOURCE: PSI triggers with a window that is not a multiple of
// 2 s (500 ms here, the kernel's minimum).
func TestCgroup2Cap_SysResource_PSITrigger500msWindow(t *testing.T) {
	vm.RequireCgroup2(t, "memory")
	const node = "/proc/pressure/memory"
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("no PSI in this kernel (make test-cgroup2 boots it with psi=1): %v", err)
	}
	name := "evictiond-caps-" + string(uuid.NewUUID())[:8]
	kubepods := filepath.Join(v2Mount, name)
	if err := os.Mkdir(kubepods, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(kubepods); err != nil {
			t.Errorf("removing %s: %v", kubepods, err)
		}
	})
	pods := filepath.Join(kubepods, "memory.pressure")
	j := job{Kind: "psi", Kubepods: name}
	t.Logf("kernel %s", kernelRelease(t))

	t.Run("with", func(t *testing.T) {
		r := run(t, Shipped, j)
		for _, target := range []string{node, pods} {
			st := psiStatus(t, r, target)
			if st.Mode != notify.ModeArmed || st.Window != 500*time.Millisecond || st.Stall != 50*time.Millisecond {
				t.Errorf("%s: %+v, want armed with the asked 50ms/500ms", target, st)
			}
		}
	})
	t.Run("without", func(t *testing.T) {
		r := run(t, Without("SYS_RESOURCE"), j)
		// The kernel refuses the 500 ms window (EINVAL: writers without
		// the capability may only ask for multiples of 2 s); the notifier
		// re-arms with the next 2 s window, the stall scaled to the same
		// share, and says so.
		for _, target := range []string{node, pods} {
			st := psiStatus(t, r, target)
			if st.Mode != notify.ModeArmed || st.Window != 2*time.Second || st.Stall != 200*time.Millisecond {
				t.Errorf("%s: %+v, want armed with the window adapted to 200ms/2s", target, st)
			}
			warned := false
			for _, w := range r.Warnings {
				warned = warned || strings.Contains(w, "PSI window refused without CAP_SYS_RESOURCE") && strings.Contains(w, "file="+target)
			}
			if !warned {
				t.Errorf("no warning that the window of %s was adapted; warnings: %q", target, r.Warnings)
			}
		}
		if r.PSIFallbacks != 0 {
			t.Errorf("evictiond_notifier_fallback_total{notifier=psi,reason=arm_failed} = %v, want 0 (adapted, not replaced by the poll)", r.PSIFallbacks)
		}
	})
}

// CAP_DAC_READ_SEARCH: the disk usage of a pod's emptyDir in which the pod
// (uid 1000) made a 0700 directory with files.
func TestCgroup2Cap_DacReadSearch_EmptyDirWithAnotherUsersPrivateDirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	kubelet, logs := filepath.Join(root, "kubelet"), filepath.Join(root, "pods-logs")
	uid := types.UID(uuid.NewUUID())
	vol := filepath.Join(kubelet, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", "scratch")
	for _, d := range []string{vol, logs} {
		if err := os.MkdirAll(d, 0o750); err != nil { // the kubelet's pod directories: 0750 root
			t.Fatal(err)
		}
	}
	if err := os.Chmod(vol, 0o777); err != nil { // an emptyDir: 0777 root
		t.Fatal(err)
	}
	// What the pod wrote as uid 1000: a file beside a private tree.
	private := filepath.Join(vol, "private")
	files := map[string]int{
		filepath.Join(vol, "public.bin"):                64 << 10,
		filepath.Join(private, "a.bin"):                 256 << 10,
		filepath.Join(private, "b.bin"):                 256 << 10,
		filepath.Join(private, "deeper", "c.bin"):       128 << 10,
		filepath.Join(private, "deeper", "deepest.bin"): 32 << 10,
	}
	if err := os.MkdirAll(filepath.Join(private, "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	for f, size := range files {
		if err := os.WriteFile(f, bytes.Repeat([]byte{'x'}, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{vol, private, filepath.Join(private, "deeper")}
	for f := range files {
		paths = append(paths, f)
	}
	// Owned by the pod's user, private; the expected usage is du's.
	var wantBytes int64
	for _, p := range paths {
		if p != vol {
			if err := os.Lchown(p, otherUID, otherUID); err != nil {
				t.Fatal(err)
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		wantBytes += st.Blocks * 512
	}
	for _, d := range []string{private, filepath.Join(private, "deeper")} {
		if err := os.Chmod(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	want := volume{Bytes: wantBytes, Inodes: int64(len(paths))}
	j := job{Kind: "du", KubeletRoot: kubelet, PodLogs: logs, PodUID: uid}

	t.Run("with", func(t *testing.T) {
		r := run(t, Shipped, j)
		if r.PodError != "" {
			t.Errorf("pod error %q, want none", r.PodError)
		}
		if got, ok := r.Volumes["scratch"]; !ok || got != want {
			t.Errorf("emptyDir scratch: %+v (measured %v), want %+v (every file, private ones too)", got, ok, want)
		}
	})
	t.Run("without", func(t *testing.T) {
		r := run(t, Without("DAC_READ_SEARCH"), j)
		// Never a partial figure: the volume is unmeasured and the error
		// says which directory and what is missing.
		if got, ok := r.Volumes["scratch"]; ok {
			t.Errorf("emptyDir scratch measured as %+v without CAP_DAC_READ_SEARCH (the whole is %+v): an under-count", got, want)
		}
		for _, s := range []string{private, "permission denied", "CAP_DAC_READ_SEARCH"} {
			if !strings.Contains(r.PodError, s) {
				t.Errorf("pod error %q does not name %q", r.PodError, s)
			}
		}
	})
}

// victim is a pod's task running as uid 1000.
type victim struct {
	cmd    *exec.Cmd
	exited chan error
}

// startVictim runs `sleep` as uid 1000 in the cgroup whose cgroup.procs is
// procs; the cgroup is thawed and the task killed when the test ends.
func startVictim(t *testing.T, procs, freezeFile, thawed string) *victim {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := &victim{cmd: cmd, exited: make(chan error, 1)}
	go func() { v.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = os.WriteFile(freezeFile, []byte(thawed), 0o644)
		_ = cmd.Process.Kill()
		select {
		case <-v.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the victim %d did not exit within 10s of SIGKILL", cmd.Process.Pid)
		}
	})
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("moving the victim into %s: %v", procs, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil || !strings.Contains(string(status), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", otherUID, otherUID, otherUID, otherUID)) {
		t.Fatalf("the victim does not run as uid %d (%v):\n%s", otherUID, err, status)
	}
	return v
}

// killedBySIGKILL waits for the victim's end and checks it was SIGKILL.
func (v *victim) killedBySIGKILL(t *testing.T) {
	t.Helper()
	select {
	case err := <-v.exited:
		v.exited <- err // for the cleanup
		if ws, ok := v.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the victim ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the victim (uid %d) is still running 5s after the brake's Kill", otherUID)
	}
}

func (v *victim) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-v.exited:
		v.exited <- err
		t.Errorf("the victim ended (%v), want it running", err)
	case <-time.After(200 * time.Millisecond):
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// CAP_KILL: the brake's kill of a frozen pod whose task runs as uid 1000.
func TestCgroup2Cap_Kill_FrozenPodOfAnotherUser(t *testing.T) {
	// cgroup v2: cgroup.kill. The kernel signals every task itself, with no
	// permission check against the writer's credentials: CAP_KILL is not
	// needed.
	t.Run("v2", func(t *testing.T) {
		vm.RequireCgroup2(t, "memory")
		for _, c := range []struct {
			name string
			set  []Capability
		}{{"with", Shipped}, {"without", Without("KILL")}} {
			t.Run(c.name, func(t *testing.T) {
				pod := filepath.Join(v2Mount, "evictiond-caps-pod"+string(uuid.NewUUID()))
				ctr := filepath.Join(pod, "ctr")
				for _, d := range []string{pod, ctr} {
					if err := os.Mkdir(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				t.Cleanup(func() {
					for _, d := range []string{ctr, pod} {
						if err := removeWhenEmpty(d); err != nil {
							t.Errorf("removing %s: %v", d, err)
						}
					}
				})
				v := startVictim(t, filepath.Join(ctr, "cgroup.procs"), filepath.Join(pod, "cgroup.freeze"), "0")
				r := run(t, c.set, job{Kind: "kill", Version: 2, Dir: pod})
				if r.FreezeErr != "" || r.KillErr != "" || r.Killed != 1 || r.FrozenAfter {
					t.Errorf("brake: %+v, want frozen, 1 process killed, thawed", r)
				}
				v.killedBySIGKILL(t)
			})
		}
	})
	// cgroup v1 (a hybrid host's freezer, mounted on the same kernel): no
	// cgroup.kill, so kill(2) of each process, which the kernel refuses for
	// another user's process without CAP_KILL.
	t.Run("v1-freezer", func(t *testing.T) {
		mnt := t.TempDir()
		if err := unix.Mount("freezer", mnt, "cgroup", 0, "freezer"); err != nil {
			t.Fatalf("mounting the cgroup v1 freezer at %s (vm.Cmdline must leave freezer out of cgroup_no_v1): %v", mnt, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(mnt, 0); err != nil {
				t.Errorf("unmounting the v1 freezer at %s: %v", mnt, err)
			}
		})
		for _, c := range []struct {
			name string
			set  []Capability
		}{{"with", Shipped}, {"without", Without("KILL")}} {
			t.Run(c.name, func(t *testing.T) {
				pod := filepath.Join(mnt, "pod"+string(uuid.NewUUID()))
				if err := os.Mkdir(pod, 0o755); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := removeWhenEmpty(pod); err != nil {
						t.Errorf("removing %s: %v", pod, err)
					}
				})
				state := filepath.Join(pod, "freezer.state")
				v := startVictim(t, filepath.Join(pod, "cgroup.procs"), state, "THAWED")
				r := run(t, c.set, job{Kind: "kill", Version: 1, Dir: pod})
				if r.FreezeErr != "" {
					t.Fatalf("brake freeze: %s", r.FreezeErr)
				}
				if c.name == "with" {
					if r.KillErr != "" || r.Killed != 1 || r.FrozenAfter {
						t.Errorf("brake: %+v, want 1 process killed, thawed", r)
					}
					v.killedBySIGKILL(t)
					return
				}
				// Refused, said so, and the pod thawed: it ends on the normal
				// path (the kubelet's signals, which a frozen task ignores).
				for _, s := range []string{fmt.Sprintf("killing process %d", v.cmd.Process.Pid), "operation not permitted", "CAP_KILL"} {
					if !strings.Contains(r.KillErr, s) {
						t.Errorf("kill error %q does not name %q", r.KillErr, s)
					}
				}
				if r.Killed != 0 || r.FrozenAfter {
					t.Errorf("brake: %+v, want nothing killed and the pod thawed", r)
				}
				if got := readTrim(t, state); got != "THAWED" {
					t.Errorf("freezer.state %q after the failed kill, want THAWED (a failed kill must not leave the pod frozen)", got)
				}
				v.running(t)
			})
		}
	})
}

// removeWhenEmpty removes a cgroup once its killed tasks are gone.
func removeWhenEmpty(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || os.IsNotExist(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
