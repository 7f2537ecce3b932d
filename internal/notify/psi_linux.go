//go:build linux

package notify

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// psiArm is one armed PSI trigger.
type psiArm struct {
	path          string
	fd            int
	stall, window time.Duration
	id            int32 // reactor registration
	closed        bool  // guarded by kernelNotifiers.mu
}

// psiTargets lists the pressure files to arm: the node's, and the kubepods
// cgroup's in the cgroup2 hierarchy. On a hybrid v1 host kubepods is in the
// unified hierarchy only with the systemd driver; elsewhere it is skipped.
func (k *kernelNotifiers) psiTargets() (required []string, optional []string) {
	required = []string{k.m.nodePressurePath()}
	kubepods := k.m.kubepodsUnifiedDir(k.mode) + "/memory.pressure"
	if k.mode == CgroupModeV2 {
		return append(required, kubepods), nil
	}
	return required, []string{kubepods}
}

func (k *kernelNotifiers) armPSI(s settings) {
	m := k.m
	required, optional := k.psiTargets()
	k.mu.Lock()
	defer k.mu.Unlock() // writing a trigger is quick; events wait at most that long
	if s.PSI != k.psiArmedWith {
		// A reload changed the trigger: replace every armed one.
		for p, a := range k.psi {
			k.disarmPSI(a)
			delete(k.psi, p)
		}
		k.psiArmedWith = s.PSI
	}
	if !s.PSI.Enabled {
		for _, p := range append(required, optional...) {
			m.setDisabled(SourcePSI, p, "disabled by configuration")
		}
		return
	}
	for _, p := range required {
		k.armPSITarget(s.PSI, p, true)
	}
	for _, p := range optional {
		k.armPSITarget(s.PSI, p, false)
	}
}

func (k *kernelNotifiers) armPSITarget(opts PSIOptions, path string, required bool) {
	m := k.m
	if _, ok := k.psi[path]; ok {
		return // triggers do not drift; armed stays armed until it fails
	}
	if !required {
		if _, err := os.Stat(path); err != nil {
			m.setDisabled(SourcePSI, path, "not present (kubepods is not in the cgroup2 hierarchy on this host)")
			return
		}
	}
	fd, stall, window, err := openPSITrigger(path, opts.Type, opts.Stall, opts.Window)
	if err != nil {
		if path == m.nodePressurePath() && errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w (no PSI: kernel without CONFIG_PSI or booted with psi=0): %w", errUnsupported, err)
		}
		m.fallBack(SourcePSI, path, reasonFor(err), err)
		return
	}
	if window != opts.Window {
		m.log.Warn("PSI window refused without CAP_SYS_RESOURCE; adapted to a multiple of 2s",
			"file", path, "requestedWindow", opts.Window, "requestedStall", opts.Stall,
			"window", window, "stall", stall)
	}
	arm := &psiArm{path: path, fd: fd, stall: stall, window: window}
	id, err := k.r.add(fd, unix.EPOLLPRI, func(events uint32) { k.onPSIEvent(arm, events) })
	if err != nil {
		unix.Close(fd)
		m.fallBack(SourcePSI, path, ReasonArmFailed, err)
		return
	}
	arm.id = id
	k.psi[path] = arm
	m.log.Info("PSI trigger armed", "file", path, "type", opts.Type, "stall", stall, "window", window)
	m.setArmed(NotifierStatus{Source: SourcePSI, Target: path, Stall: stall, Window: window,
		Detail: fmt.Sprintf("%s %d %d", opts.Type, stall.Microseconds(), window.Microseconds())})
}

// onPSIEvent runs on the reactor goroutine.
func (k *kernelNotifiers) onPSIEvent(arm *psiArm, events uint32) {
	// The kernel reports EPOLLERR when the trigger is gone (e.g. its cgroup
	// was removed).
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		k.mu.Lock()
		defer k.mu.Unlock()
		if arm.closed {
			return
		}
		k.disarmPSI(arm)
		if k.psi[arm.path] == arm {
			delete(k.psi, arm.path)
		}
		k.m.fallBack(SourcePSI, arm.path, ReasonFailed, fmt.Errorf("PSI trigger on %s reported error (events %#x)", arm.path, events))
		return
	}
	if events&unix.EPOLLPRI != 0 {
		k.m.deliver(SourcePSI, arm.path)
	}
}

// disarmPSI is called with k.mu held.
func (k *kernelNotifiers) disarmPSI(arm *psiArm) {
	if arm.closed {
		return
	}
	arm.closed = true
	k.r.remove(arm.fd, arm.id)
	unix.Close(arm.fd) // closing the fd destroys the trigger
}

// openPSITrigger writes "<type> <stall_us> <window_us>" to a pressure file
// and returns the fd to poll for EPOLLPRI. When the kernel refuses the
// window with EINVAL because the writer lacks CAP_SYS_RESOURCE (only
// multiples of 2s are allowed then), it retries once with the adapted window.
func openPSITrigger(path string, typ PSIStallType, stall, window time.Duration) (int, time.Duration, time.Duration, error) {
	fd, err := writePSITrigger(path, typ, stall, window)
	if err == nil {
		return fd, stall, window, nil
	}
	adaptedStall, adaptedWindow, adapted := adaptPSIWindow(stall, window)
	if !errors.Is(err, unix.EINVAL) || !adapted {
		return -1, 0, 0, err
	}
	fd, err2 := writePSITrigger(path, typ, adaptedStall, adaptedWindow)
	if err2 != nil {
		return -1, 0, 0, fmt.Errorf("%w; adapted to a 2s-multiple window: %w", err, err2)
	}
	return fd, adaptedStall, adaptedWindow, nil
}

func writePSITrigger(path string, typ PSIStallType, stall, window time.Duration) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", path, err)
	}
	line := fmt.Sprintf("%s %d %d", typ, stall.Microseconds(), window.Microseconds())
	if _, err := unix.Write(fd, append([]byte(line), 0)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("writing PSI trigger %q to %s: %w", line, path, err)
	}
	return fd, nil
}
