package confine

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// capKillBit is CAP_KILL in the /proc status masks.
const capKillBit = uint64(1) << unix.CAP_KILL

// DropCapKill removes CAP_KILL from the effective, permitted and inheritable
// sets of every thread (capabilities are per thread: capset on one leaves the
// others able to signal), checks it from /proc/self/task, and returns how
// many threads it checked. The bounding set keeps it (dropping from it needs
// CAP_SETPCAP, which the agent does not hold); with no_new_privs nothing can
// raise it back into the permitted set.
func DropCapKill() (int, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	runtime.LockOSThread()
	err := unix.Capget(&hdr, &data[0])
	runtime.UnlockOSThread()
	if err != nil {
		return 0, fmt.Errorf("capget: %w", err)
	}
	// CAP_KILL (5) is in the first 32-bit word.
	data[0].Effective &^= 1 << unix.CAP_KILL
	data[0].Permitted &^= 1 << unix.CAP_KILL
	data[0].Inheritable &^= 1 << unix.CAP_KILL
	hdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	hdr.Pid = 0
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		if errors.Is(errno, syscall.ENOTSUP) {
			return 0, fmt.Errorf("capset on all threads: %w (a binary built with cgo: build with CGO_ENABLED=0)", errno)
		}
		return 0, fmt.Errorf("capset on all threads: %w", errno)
	}
	threads, err := Threads("/proc/self")
	if err != nil {
		return 0, fmt.Errorf("reading the threads' capabilities: %w", err)
	}
	for _, t := range threads {
		if t.HoldsCapKill() {
			return 0, fmt.Errorf("thread %d still holds CAP_KILL (CapEff %016x CapPrm %016x CapInh %016x)", t.TID, t.CapEff, t.CapPrm, t.CapInh)
		}
	}
	return len(threads), nil
}

// HoldsCapKill says whether a thread's effective, permitted or inheritable
// set has CAP_KILL.
func (t ThreadStatus) HoldsCapKill() bool {
	return (t.CapEff|t.CapPrm|t.CapInh)&capKillBit != 0
}
