package apiserver

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

// process is one component run by the environment, with its output in a log file.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed
}

func (p *process) start() error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Pdeathsig: a test binary killed by `go test -timeout` must not leave components behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s (%s): %w", p.name, p.path, err)
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

// running reports whether the process was started and has not exited.
func (p *process) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, and SIGKILL after grace (at once when grace is 0), and waits for
// the exit.
func (p *process) stop(grace time.Duration) {
	if !p.running() {
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

// failure describes why the process is not healthy, with the tail of its log.
func (p *process) failure(cause error) error {
	state := "running"
	if p.cmd != nil && !p.running() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	return fmt.Errorf("%s (%s): %w\n--- last lines of %s ---\n%s", p.name, state, cause, p.logPath, tail(p.logPath, 40))
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
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
