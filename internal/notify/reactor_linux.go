//go:build linux

package notify

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// reactor multiplexes every kernel notifier fd on one epoll set, served by
// one goroutine: memcg eventfds (EPOLLIN), PSI trigger fds (EPOLLPRI, which
// Go's netpoller does not watch), and the inotify fd of memory.events. A
// kick eventfd interrupts the wait for re-arm requests and shutdown.
type reactor struct {
	epfd     int
	kickfd   int
	handlers map[int32]func(events uint32)
	events   []unix.EpollEvent
}

func newReactor() (*reactor, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	kickfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	r := &reactor{epfd: epfd, kickfd: kickfd, handlers: map[int32]func(uint32){}, events: make([]unix.EpollEvent, 16)}
	if err := r.add(kickfd, unix.EPOLLIN, func(uint32) { drainEventfd(kickfd) }); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *reactor) add(fd int, events uint32, handle func(events uint32)) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add fd %d: %w", fd, err)
	}
	r.handlers[int32(fd)] = handle
	return nil
}

// remove unregisters fd; the caller closes it.
func (r *reactor) remove(fd int) {
	_ = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, fd, nil) // fails only if already gone
	delete(r.handlers, int32(fd))
}

// kick interrupts wait; safe from any goroutine.
func (r *reactor) kick() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(r.kickfd, one[:]) // EAGAIN means a kick is already pending
}

// wait blocks up to timeout and runs the handler of each ready fd.
func (r *reactor) wait(timeout time.Duration) error {
	ms := int((timeout + time.Millisecond - 1) / time.Millisecond)
	if ms < 0 {
		ms = 0
	}
	n, err := unix.EpollWait(r.epfd, r.events, ms)
	if errors.Is(err, unix.EINTR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("epoll_wait: %w", err)
	}
	for _, ev := range r.events[:n] {
		if handle, ok := r.handlers[ev.Fd]; ok { // a handler may have removed a later fd
			handle(ev.Events)
		}
	}
	return nil
}

func (r *reactor) close() {
	unix.Close(r.kickfd)
	unix.Close(r.epfd)
}

// drainEventfd reads an eventfd's counter (nonblocking) and returns it.
func drainEventfd(fd int) uint64 {
	var buf [8]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n != 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(buf[:])
}
