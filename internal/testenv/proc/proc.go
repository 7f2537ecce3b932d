// Package proc runs the processes of the test environments (etcd,
// kube-apiserver, controller managers, scheduler, kubelet, containerd,
// Prometheus) with their output in a log file, and cleans up after them.
package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is one component, with its combined output in LogPath.
type Process struct {
	Name    string
	Path    string
	Args    []string
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed
}

// Start starts the process. Pdeathsig: a test binary killed by `go test
// -timeout` leaves no component behind (StartCmd says why it forks from its
// own thread). Own process group: a Ctrl-C reaches
// the test first, whose cleanup stops things in order.
func (p *Process) Start() error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := StartCmd(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s (%s): %w", p.Name, p.Path, err)
	}
	p.cmd = cmd
	p.exited = make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return nil
}

// Running reports whether the process was started and has not exited.
func (p *Process) Running() bool {
	if p == nil || p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Pid is the running process's id, 0 when it is not running (for reading
// its CPU time and memory from /proc).
func (p *Process) Pid() int {
	if !p.Running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Stop sends SIGTERM, and SIGKILL after grace (at once when grace is 0), and
// waits for the exit.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	if grace == 0 {
		_ = p.cmd.Process.Kill()
		<-p.exited
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Failure wraps cause with the process's state and the tail of its log.
func (p *Process) Failure(cause error) error {
	state := "running"
	if p.cmd == nil {
		state = "not started"
	} else if !p.Running() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	return fmt.Errorf("%s (%s): %w\n--- last lines of %s ---\n%s", p.Name, state, cause, p.LogPath, Tail(p.LogPath, 40))
}

// Tail returns the last n lines of the file at path.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	const maxBytes = 64 << 10
	if info, err := f.Stat(); err == nil && info.Size() > maxBytes {
		_, _ = f.Seek(-maxBytes, io.SeekEnd)
	}
	data, err := io.ReadAll(f)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
