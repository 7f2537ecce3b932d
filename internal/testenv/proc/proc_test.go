package proc

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestProcessStartStopAndFailureCarriesLogTail(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p := &Process{Name: "sh", Path: "/bin/sh", Args: []string{"-c", "echo first; echo last; exec sleep 60"}, LogPath: log}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(Tail(log, 1), "last") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Running() {
		t.Fatal("not running after Start")
	}
	p.Stop(time.Second)
	if p.Running() {
		t.Fatal("still running after Stop")
	}
	msg := p.Failure(errors.New("boom")).Error()
	if !strings.Contains(msg, "sh (exited:") || !strings.Contains(msg, "boom") || !strings.HasSuffix(msg, "first\nlast") {
		t.Fatalf("failure %q lacks the state, the cause or the log tail", msg)
	}
}

func TestTailKeepsLastLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, []byte("a\nb\nc\n"), 0o600)
	if got := Tail(path, 2); got != "b\nc" {
		t.Fatalf("Tail = %q", got)
	}
}

func TestUnescapeMountPath(t *testing.T) {
	if got := UnescapeMountPath(`/var/lib/with\040space`); got != "/var/lib/with space" {
		t.Fatalf("got %q", got)
	}
}

// TestProcessOutlivesTheThreadThatStartedIt starts components from goroutines
// locked to their threads and lets those goroutines return still locked,
// which ends the threads, as evictiond's sentinels do when a daemon under test
// stops. The components must survive: Pdeathsig is for the test binary's death.
// Three at once, on three threads: one of them may be the main thread, which
// the runtime never ends.
func TestProcessOutlivesTheThreadThatStartedIt(t *testing.T) {
	const n = 3
	var ps [n]*Process
	started := make(chan error, n)
	release := make(chan struct{})
	for i := range ps {
		ps[i] = &Process{Name: "sleep", Path: "/bin/sleep", Args: []string{"60"}, LogPath: filepath.Join(t.TempDir(), "sleep.log")}
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			started <- ps[i].Start()
			<-release // hold the thread until all three have started
		}()
	}
	for range ps {
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		defer p.Stop(0)
	}
	close(release)
	// The goroutines return and their threads end within a scheduler round;
	// Pdeathsig would have killed the components by then.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		for i, p := range ps {
			if !p.Running() {
				t.Fatalf("component %d died with the thread that started it: %v", i, p.err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
