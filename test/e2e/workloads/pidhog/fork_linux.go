package main

import (
	"syscall"
	"unsafe"
)

// forkHeld forks one child that holds its PID until it is killed: the child runs no Go code
// after the fork (only raw system calls, in this function's frame, which cannot grow the
// stack), and pauses forever with every signal blocked, so only SIGKILL ends it — the
// container's stop, the brake's kill, an eviction. This is what a C fork bomb's child costs
// the node: one task (a PID, counted by pid_max and by the pids cgroup), a kernel stack and
// the page tables of a copy-on-write copy of its parent, and no CPU.
//
// It returns the child's PID in the parent, or the fork's errno (EAGAIN when the pids cgroup
// or pid_max refuses it).
//
//go:nosplit
//go:norace
func forkHeld(allSignals *uint64, saved *uint64) (uintptr, syscall.Errno) {
	// Block every signal on this (locked) thread across the fork, so the child inherits a
	// full mask: no Go signal handler ever runs in it.
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 0 /* SIG_BLOCK */, uintptr(unsafe.Pointer(allSignals)), uintptr(unsafe.Pointer(saved)), 8, 0, 0)
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno == 0 && pid == 0 {
		for { // the child
			syscall.RawSyscall(syscall.SYS_PAUSE, 0, 0, 0)
		}
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(saved)), 0, 8, 0, 0)
	return pid, errno
}
