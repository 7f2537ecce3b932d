package confine

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// abi is what the filter needs of an architecture: its audit arch (the arch
// field of seccomp_data) and its numbers of the refused calls.
type abi struct {
	auditArch                      uint32
	nameToHandleAt, openByHandleAt uint32
	// x32Bit: on x86_64 the x32 ABI shares the audit arch and sets this bit
	// in the call number; 0 where there is no such ABI.
	x32Bit uint32
}

// abis are the architectures the image is built for (IMAGE_PLATFORMS in the
// Makefile); the numbers are the kernel's (include/uapi/asm-generic/unistd.h
// for arm64, arch/x86/entry/syscalls/syscall_64.tbl), checked against
// golang.org/x/sys for the architecture the tests run on.
var abis = map[string]abi{
	"amd64": {auditArch: unix.AUDIT_ARCH_X86_64, nameToHandleAt: 303, openByHandleAt: 304, x32Bit: 0x40000000},
	"arm64": {auditArch: unix.AUDIT_ARCH_AARCH64, nameToHandleAt: 264, openByHandleAt: 265},
}

// seccomp_data offsets (include/uapi/linux/seccomp.h).
const (
	offNR   = 0
	offArch = 4
)

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
)

// filter is the program for goarch. It refuses with EPERM:
//   - open_by_handle_at and name_to_handle_at;
//   - every call of another ABI than the binary's (the audit arch differs:
//     i386 through int 0x80 on x86_64, arm32 on arm64; or x32 on x86_64).
//     A filter that only compares call numbers must: another ABI numbers its
//     calls differently (open_by_handle_at is 342 on i386), RuntimeDefault
//     allows those ABIs, and the agent, a static Go binary, never uses them.
//
// and allows the rest, which the runtime's own filter then judges: the
// kernel runs every filter and the most restrictive answer wins.
func filter(goarch string) ([]bpf.Instruction, error) {
	a, ok := abis[goarch]
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for GOARCH %s (only %s and %s)", goarch, "amd64", "arm64")
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: a.auditArch, SkipTrue: 0}, // patched below: to deny
		bpf.LoadAbsolute{Off: offNR, Size: 4},
	}
	if a.x32Bit != 0 {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: a.x32Bit, SkipTrue: 0})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.openByHandleAt, SkipTrue: 0},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.nameToHandleAt, SkipTrue: 0},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM},
	)
	// Every conditional jump's true branch goes to the last instruction.
	deny := len(prog) - 1
	for i, ins := range prog {
		if j, ok := ins.(bpf.JumpIf); ok {
			j.SkipTrue = uint8(deny - i - 1)
			prog[i] = j
		}
	}
	return prog, nil
}

// InstallSeccomp stacks the filter on every thread of the process (TSYNC)
// and returns how many threads it checked it on. It sets no_new_privs when
// it is not set (allowPrivilegeEscalation: false sets it in the pod): the
// kernel takes a filter from a process without CAP_SYS_ADMIN only then.
func InstallSeccomp() (int, error) {
	insts, err := filter(runtime.GOARCH)
	if err != nil {
		return 0, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return 0, fmt.Errorf("assembling the seccomp filter: %w", err)
	}
	sf := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		sf[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(sf)), Filter: &sf[0]}

	before, err := Threads("/proc/self")
	if err != nil {
		return 0, fmt.Errorf("reading the threads' seccomp state: %w", err)
	}
	// prctl and seccomp on one thread: no_new_privs is per thread, and the
	// kernel checks the caller's; TSYNC then sets it on the others.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("prctl(PR_GET_NO_NEW_PRIVS): %w", err)
	}
	if nnp != 1 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 0, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
		}
	}
	r1, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(sf)
	switch {
	case errno != 0:
		return 0, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	case r1 != 0:
		// TSYNC names the thread it could not synchronise (another filter tree).
		return 0, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread %d cannot take the filter", r1)
	}
	return verifySeccomp(before)
}

// verifySeccomp checks, from /proc, that every thread is in filter mode with
// no_new_privs and, where the kernel counts filters (5.9+), one more filter
// than it had before.
func verifySeccomp(before []ThreadStatus) (int, error) {
	had := map[int]int{}
	for _, t := range before {
		had[t.TID] = t.SeccompFilters
	}
	after, err := Threads("/proc/self")
	if err != nil {
		return 0, fmt.Errorf("reading the threads' seccomp state: %w", err)
	}
	for _, t := range after {
		if t.Seccomp != unix.SECCOMP_MODE_FILTER || !t.NoNewPrivs {
			return 0, fmt.Errorf("thread %d: Seccomp %d, NoNewPrivs %t after the filter was installed", t.TID, t.Seccomp, t.NoNewPrivs)
		}
		if n, ok := had[t.TID]; ok && n >= 0 && t.SeccompFilters != n+1 {
			return 0, fmt.Errorf("thread %d: Seccomp_filters %d, was %d", t.TID, t.SeccompFilters, n)
		}
	}
	return len(after), nil
}
