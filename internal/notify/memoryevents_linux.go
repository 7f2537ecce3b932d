//go:build linux

package notify

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// memoryEventsWatch is the inotify watch on the kubepods cgroup's
// memory.events (cgroup v2). The kernel raises IN_MODIFY on the file each
// time a counter changes; the counters that grew say why.
type memoryEventsWatch struct {
	path     string
	fd       int
	id       int32            // reactor registration
	counters map[string]int64 // guarded by kernelNotifiers.mu
}

func (k *kernelNotifiers) armMemoryEvents(s settings) {
	m := k.m
	path := m.memoryEventsPath()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case !s.MemoryEvents:
		k.disarmMemoryEvents()
		m.setDisabled(SourceMemoryEvents, path, "disabled by configuration")
		return
	case k.mode != CgroupModeV2:
		m.setDisabled(SourceMemoryEvents, path, "cgroup v1: memory.events exists only on cgroup v2")
		return
	case k.event != nil:
		return
	}
	w, err := watchMemoryEvents(path)
	if err != nil {
		m.fallBack(SourceMemoryEvents, path, reasonFor(err), err)
		return
	}
	id, err := k.r.add(w.fd, unix.EPOLLIN, func(events uint32) { k.onMemoryEvents(w, events) })
	if err != nil {
		unix.Close(w.fd)
		m.fallBack(SourceMemoryEvents, path, ReasonArmFailed, err)
		return
	}
	w.id = id
	k.event = w
	m.log.Info("memory.events watch armed", "file", path, "counters", w.counters)
	m.setArmed(NotifierStatus{Source: SourceMemoryEvents, Target: path, Detail: "inotify IN_MODIFY; wakes on high, max, oom, oom_kill"})
}

func watchMemoryEvents(path string) (*memoryEventsWatch, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch on %s: %w", path, err)
	}
	return &memoryEventsWatch{path: path, fd: fd, counters: parseFlatKeyed(data)}, nil
}

// onMemoryEvents runs on the reactor goroutine.
func (k *kernelNotifiers) onMemoryEvents(w *memoryEventsWatch, events uint32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.event != w {
		return // disarmed meanwhile
	}
	ignored, err := drainInotify(w.fd)
	if err == nil && ignored {
		err = errors.New("watch removed by the kernel (cgroup deleted?)")
	}
	if err == nil && events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		err = fmt.Errorf("inotify fd reported error (events %#x)", events)
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(w.path)
	}
	if err != nil {
		k.disarmMemoryEvents()
		k.m.fallBack(SourceMemoryEvents, w.path, ReasonFailed, fmt.Errorf("watching %s: %w", w.path, err))
		return
	}
	after := parseFlatKeyed(data)
	if _, ok := after["max"]; !ok {
		return // not a memory.events snapshot (a writer caught mid-update); wait for the next
	}
	grew := memoryEventsIncreased(w.counters, after)
	w.counters = after
	if len(grew) > 0 {
		k.m.deliver(SourceMemoryEvents, w.path)
		k.m.log.Debug("kubepods memory events", "file", w.path, "grew", grew, "counters", after)
	}
}

// disarmMemoryEvents is called with k.mu held.
func (k *kernelNotifiers) disarmMemoryEvents() {
	if k.event == nil {
		return
	}
	k.r.remove(k.event.fd, k.event.id)
	unix.Close(k.event.fd)
	k.event = nil
}

// drainInotify reads every queued inotify event and reports whether one of
// them was IN_IGNORED (the watch is gone).
func drainInotify(fd int) (ignored bool, err error) {
	var buf [4096]byte
	for {
		n, err := unix.Read(fd, buf[:])
		if errors.Is(err, unix.EAGAIN) {
			return ignored, nil
		}
		if err != nil {
			return ignored, fmt.Errorf("reading inotify events: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_IGNORED != 0 {
				ignored = true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
