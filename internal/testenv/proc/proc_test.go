package proc

import (
	"errors"
	"os"
	"path/filepath"
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
