//go:build linux

package notify

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// reactor multiplexes every kernel notifier fd on one epoll set, served by
// one goroutine (serve): memcg eventfds (EPOLLIN), PSI trigger fds (EPOLLPRI,
// which Go's netpoller does not watch), and the inotify fd of memory.events.
//
// Registrations may be added and removed from another goroutine (the arming
// one) while serve waits: arming a memcg threshold blocks for tens of
// milliseconds in the kernel (synchronize_rcu), and must not delay the
// delivery of events. Each registration carries its own id in the epoll
// data, so an event still queued for a closed fd never reaches a handler
// registered later on the same fd number.
type reactor struct {
	epfd   int
	kickfd int

	mu       sync.Mutex
	nextID   int32
	handlers map[int32]func(events uint32)
}

const kickID = 0

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
	r := &reactor{epfd: epfd, kickfd: kickfd, nextID: kickID + 1, handlers: map[int32]func(uint32){}}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(kickfd), Pad: kickID}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, kickfd, &ev); err != nil {
		r.close()
		return nil, fmt.Errorf("epoll_ctl add kick fd: %w", err)
	}
	return r, nil
}

// add registers fd; handle runs on the serving goroutine. It returns the id
// to remove the registration with.
func (r *reactor) add(fd int, events uint32, handle func(events uint32)) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.nextID
	r.nextID++
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: id}
	if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return 0, fmt.Errorf("epoll_ctl add fd %d: %w", fd, err)
	}
	r.handlers[id] = handle
	return id, nil
}

// remove unregisters fd; the caller closes it afterwards.
func (r *reactor) remove(fd int, id int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, fd, nil) // fails only if already gone
	delete(r.handlers, id)
}

// kick interrupts serve's wait; safe from any goroutine.
func (r *reactor) kick() { signalEventfd(r.kickfd) }

// signalEventfd adds 1 to a nonblocking eventfd's counter, waking its
// waiters; EAGAIN (the counter full) means a wake is already pending.
func signalEventfd(fd int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(fd, one[:])
}

// serve waits for events and runs their handlers until stopped() is true
// after a kick. It returns an error only when epoll itself fails.
func (r *reactor) serve(stopped func() bool) error {
	events := make([]unix.EpollEvent, 16)
	for !stopped() {
		n, err := unix.EpollWait(r.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			if ev.Pad == kickID {
				drainEventfd(r.kickfd)
				continue
			}
			r.mu.Lock()
			handle, ok := r.handlers[ev.Pad]
			r.mu.Unlock()
			if ok {
				handle(ev.Events)
			}
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
