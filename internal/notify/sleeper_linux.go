//go:build linux

package notify

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// newKernelSleeper locks the calling goroutine to its thread, makes the
// thread a sentinel (kept real-time between boosts) and returns a sleep that
// waits in ppoll(2) on an eventfd written when ctx ends. release lowers the
// thread and closes the eventfd; the thread stays locked and exits with the
// goroutine.
func newKernelSleeper(ctx context.Context, sentinel func() (release func())) (sleep func(time.Duration) bool, release func(), err error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, nil, fmt.Errorf("eventfd: %w", err)
	}
	runtime.LockOSThread()
	lower := sentinel()
	stop := context.AfterFunc(ctx, func() { signalEventfd(efd) })
	sleep = func(d time.Duration) bool {
		fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
		deadline := time.Now().Add(d)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return ctx.Err() == nil
			}
			ts := unix.NsecToTimespec(left.Nanoseconds())
			n, err := unix.Ppoll(fds, &ts, nil)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				// Cannot wait in the kernel: never spin at real-time priority.
				lower()
				return sleepOnTimer(ctx, left)
			case n > 0:
				return false // ctx ended
			}
		}
	}
	release = func() {
		stop()
		lower()
		unix.Close(efd)
	}
	return sleep, release, nil
}

// threadRunDelay returns a reader of the calling thread's run delay: its
// time runnable but not running since it started (the second field of
// /proc/thread-self/schedstat), so the poll's trail can say whether a late
// read waited for a CPU (or a real-time budget) or for something else. The
// caller must have locked its goroutine to the thread. close closes the file.
func threadRunDelay() (read func() (time.Duration, bool), close func(), err error) {
	fd, err := unix.Open("/proc/thread-self/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var buf [128]byte
	read = func() (time.Duration, bool) {
		n, err := unix.Pread(fd, buf[:], 0)
		if err != nil || n <= 0 {
			return 0, false
		}
		fields := strings.Fields(string(buf[:n]))
		if len(fields) < 2 {
			return 0, false
		}
		ns, err := strconv.ParseInt(fields[1], 10, 64)
		return time.Duration(ns), err == nil
	}
	return read, func() { unix.Close(fd) }, nil
}
