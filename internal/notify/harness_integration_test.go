//go:build integration && linux

package notify

// Test harness for the integration tests: real child memcgs on this machine's
// cgroup v1 memory controller, and a child process (this test binary re-run
// with NOTIFY_TEST_HELPER=1) that allocates, writes and thrashes inside them
// on command.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

const (
	mib            = int64(1) << 20
	v1MemoryRoot   = "/sys/fs/cgroup/memory"
	v2UnifiedRoot  = "/sys/fs/cgroup/unified"
	helperEnv      = "NOTIFY_TEST_HELPER"
	testCgroupBase = "evictiond-notify-test-"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// requireMemcgV1 fails (never skips) when the machine cannot run these tests.
func requireMemcgV1(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration tests of internal/notify need root (they create memcgs); run them as root, e.g. `sudo make test-notify`")
	}
	if _, err := os.Stat(v1MemoryRoot + "/cgroup.event_control"); err != nil {
		t.Fatalf("cgroup v1 memory controller with cgroup.event_control is required at %s: %v", v1MemoryRoot, err)
	}
}

func requirePSI(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		t.Fatalf("PSI is required (/proc/pressure/memory; boot with psi=1 on kernels built with CONFIG_PSI_DEFAULT_DISABLED): %v", err)
	}
}

func uniqueName(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return testCgroupBase + hex.EncodeToString(b[:])
}

// makeCgroup creates dir and removes it at cleanup (after the helper died).
func makeCgroup(t testing.TB, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating cgroup %s: %v", dir, err)
	}
	t.Cleanup(func() {
		for range 50 {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not remove cgroup %s", dir)
	})
}

// makeMemcg creates a child memcg with a memory limit.
func makeMemcg(t testing.TB, name string, limit int64) string {
	t.Helper()
	dir := filepath.Join(v1MemoryRoot, name)
	makeCgroup(t, dir)
	writeFile(t, filepath.Join(dir, "memory.limit_in_bytes"), strconv.FormatInt(limit, 10))
	return dir
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatalf("writing %q to %s: %v", content, path, err)
	}
}

func readInt(t testing.TB, path string) int64 {
	t.Helper()
	v, err := nodefs.ReadInt64(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// helper is the child process under test control.
type helper struct {
	t   testing.TB
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startHelper starts the child and moves it into every cgroup dir given
// (their cgroup.procs) before it allocates anything on command.
func startHelper(t testing.TB, cgroupDirs ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting helper: %v", err)
	}
	h := &helper{t: t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for _, dir := range cgroupDirs {
		writeFile(t, filepath.Join(dir, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))
	}
	h.do("ping")
	return h
}

// do sends one command and returns the reply's fields after "ok".
func (h *helper) do(format string, args ...any) []string {
	h.t.Helper()
	line := fmt.Sprintf(format, args...)
	if _, err := fmt.Fprintln(h.in, line); err != nil {
		h.t.Fatalf("helper %q: %v", line, err)
	}
	reply, err := h.out.ReadString('\n')
	if err != nil {
		h.t.Fatalf("helper %q: reading reply: %v", line, err)
	}
	fields := strings.Fields(reply)
	if len(fields) == 0 || fields[0] != "ok" {
		h.t.Fatalf("helper %q: %s", line, strings.TrimSpace(reply))
	}
	return fields[1:]
}

// alloc touches n bytes of new anonymous memory and returns the
// CLOCK_MONOTONIC time just before the first touch.
func (h *helper) alloc(n int64) time.Duration {
	h.t.Helper()
	start, _ := h.allocTimed(n)
	return start
}

// allocTimed is alloc that also returns the time after the last touch.
func (h *helper) allocTimed(n int64) (start, end time.Duration) {
	h.t.Helper()
	reply := h.do("alloc %d", n)
	s, err1 := strconv.ParseInt(reply[0], 10, 64)
	e, err2 := strconv.ParseInt(reply[1], 10, 64)
	if err1 != nil || err2 != nil {
		h.t.Fatalf("helper alloc reply %q", reply)
	}
	return time.Duration(s), time.Duration(e)
}

func (h *helper) freeAll() { h.t.Helper(); h.do("free") }

// monotonicNow reads CLOCK_MONOTONIC, the clock shared with the helper.
func monotonicNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// runHelper serves commands, one per line:
//
//	ping                    -> ok
//	alloc BYTES             -> ok <monotonic ns before the first touch> <after the last>
//	ramp BYTES MARK         -> ok <start> <end> <when the touch reached MARK bytes>
//	freelast                -> ok (unmaps the latest allocation)
//	free                    -> ok (unmaps every allocation)
//	writefile PATH BYTES    -> ok (page cache charged to this memcg)
//	thrash PATH SECONDS     -> ok (re-reads PATH, dropping its cache first)
func runHelper(in io.Reader, out io.Writer) int {
	var regions [][]byte
	sc := bufio.NewScanner(in)
	reply := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "ping":
			reply("ok")
		case "alloc":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				reply("error mmap: %v", err)
				continue
			}
			start := monotonicNow()
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			regions = append(regions, b)
			reply("ok %d %d", int64(start), int64(monotonicNow()))
		case "ramp":
			// ramp BYTES MARK: alloc that also reports when the touch reached MARK bytes.
			n, _ := strconv.ParseInt(f[1], 10, 64)
			mark, _ := strconv.ParseInt(f[2], 10, 64)
			b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				reply("error mmap: %v", err)
				continue
			}
			// Base pages only: a transparent huge page would charge 2 MiB
			// at its first touch, ahead of the mark.
			_ = unix.Madvise(b, unix.MADV_NOHUGEPAGE)
			start, marked := monotonicNow(), time.Duration(0)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
				if marked == 0 && int64(i) >= mark {
					marked = monotonicNow()
				}
			}
			regions = append(regions, b)
			reply("ok %d %d %d", int64(start), int64(monotonicNow()), int64(marked))
		case "freelast":
			if len(regions) > 0 {
				_ = unix.Munmap(regions[len(regions)-1])
				regions = regions[:len(regions)-1]
			}
			reply("ok")
		case "free":
			for _, b := range regions {
				_ = unix.Munmap(b)
			}
			regions = nil
			reply("ok")
		case "writefile":
			n, _ := strconv.ParseInt(f[2], 10, 64)
			if err := writeBytes(f[1], n); err != nil {
				reply("error %v", err)
				continue
			}
			reply("ok")
		case "thrash":
			secs, _ := strconv.Atoi(f[2])
			if err := thrash(f[1], time.Duration(secs)*time.Second); err != nil {
				reply("error %v", err)
				continue
			}
			reply("ok")
		default:
			reply("error unknown command %q", f[0])
		}
	}
	return 0
}

func writeBytes(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for written := int64(0); written < n; written += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// thrash re-reads a file larger than the memcg from two goroutines, so its
// page cache is reclaimed and refaulted over and over: memory stall.
func thrash(path string, d time.Duration) error {
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- thrashOnce(path, d) }()
	}
	return errors.Join(<-errs, <-errs)
}

func thrashOnce(path string, d time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Pages cached by the writer are charged elsewhere and would be read
	// without stalling: drop them first.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise: %w", err)
	}
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		for {
			_, err := f.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// startManager runs a Manager until the test ends and returns it once its
// notifiers made their first arming attempt.
func startManager(t testing.TB, opts Options, w *Waker) *Manager {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := New(opts, w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Manager.Run did not return within 5s of cancel")
		}
	})
	select {
	case <-m.Armed():
	case <-time.After(5 * time.Second):
		t.Fatal("notifiers made no arming attempt within 5s")
	}
	return m
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expectWake waits for a wake that includes src and returns it.
func expectWake(t testing.TB, w *Waker, src Source, timeout time.Duration) Wake {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case <-w.C():
			got := w.Take()
			if got.Sources[src] > 0 {
				return got
			}
		case <-deadline:
			t.Fatalf("no wake from %s within %v", src, timeout)
		}
	}
}

// expectNoWake fails if src wakes the loop within d.
func expectNoWake(t testing.TB, w *Waker, src Source, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case <-w.C():
			if got := w.Take(); got.Sources[src] > 0 {
				t.Fatalf("unexpected wake from %s: %v", src, got.Sources)
			}
		case <-deadline:
			return
		}
	}
}

func notifierStatus(t testing.TB, m *Manager, src Source, target string) NotifierStatus {
	t.Helper()
	for _, n := range m.Status().Notifiers {
		if n.Source == src && n.Target == target {
			return n
		}
	}
	t.Fatalf("no status for %s %q in %+v", src, target, m.Status().Notifiers)
	return NotifierStatus{}
}

// memcgReader reads allocatableMemory.available of a real memcg the way the
// monitor does on cgroup v1: limit - (usage - total_inactive_file).
func memcgReader(dir string) MemoryReader {
	return func() (policy.Observations, error) {
		s, err := readMemcgV1(dir, false, "/proc/meminfo")
		if err != nil {
			return nil, err
		}
		return policy.Observations{policy.SignalAllocatableMemoryAvailable: {
			Available: s.Available(), Capacity: s.Capacity, Time: time.Now(),
		}}, nil
	}
}

func drain(w *Waker) {
	select {
	case <-w.C():
	default:
	}
	w.Take()
}
