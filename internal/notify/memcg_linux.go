//go:build linux

package notify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// memcgArm is one armed cgroup v1 usage threshold.
type memcgArm struct {
	threshold Threshold
	dir       string
	// usageThreshold is the armed value of memory.usage_in_bytes.
	usageThreshold int64
	id             int32 // reactor registration

	// fdMu guards eventfd and closed, so the reactor can drain the eventfd
	// without kernelNotifiers.mu and never touches it once closed.
	fdMu    sync.Mutex
	eventfd int
	closed  bool

	// above (guarded by kernelNotifiers.mu): usage was at or above
	// usageThreshold when last looked at, so a crossing that happened while
	// the threshold moved is not missed.
	above bool
}

// rearmTolerance: a threshold that moved less than this keeps its
// registration. The kernel checks v1 thresholds only every 128 page events
// per CPU (about 512Ki), so finer moves buy nothing, and each registration
// costs an RCU grace period in the kernel.
const rearmTolerance = 1 << 20

// armMemcg arms, moves or drops the memcg threshold of every configured
// Threshold. It runs on the arming goroutine.
func (k *kernelNotifiers) armMemcg(s settings) {
	m := k.m
	wanted := map[string]bool{}
	for _, t := range s.Thresholds {
		if !t.memory() {
			continue // pid.available: the poll's alone
		}
		name := t.name()
		wanted[name] = true
		switch {
		case !s.MemcgThresholds:
			k.dropMemcg(name)
			m.setDisabled(SourceMemcg, name, "disabled by configuration")
			continue
		case k.mode == CgroupModeV2:
			k.dropMemcg(name)
			m.fallBack(SourceMemcg, name, ReasonUnsupported,
				fmt.Errorf("%w: cgroup v2 has no memcg usage thresholds (cgroup.event_control)", errUnsupported))
			continue
		}
		dir, isRoot := m.memcgDir(t)
		sample, err := readMemcgV1(dir, isRoot, filepath.Join(m.opts.ProcRoot, "meminfo"))
		if err != nil {
			k.dropMemcg(name)
			m.fallBack(SourceMemcg, name, reasonFor(err), fmt.Errorf("sampling memcg %s: %w", dir, err))
			continue
		}
		if !sample.Limited {
			k.dropMemcg(name)
			m.fallBack(SourceMemcg, name, ReasonNoLimit,
				fmt.Errorf("memcg %s has no memory limit, so %s is not defined there", dir, t.Signal))
			continue
		}
		available := t.resolve(sample.Capacity)
		value := usageThreshold(sample, available)
		above := sample.Usage >= value

		k.mu.Lock()
		prev := k.memcg[name]
		if prev != nil && prev.dir == dir && abs(prev.usageThreshold-value) < rearmTolerance {
			k.noteSide(prev, sample.Usage >= prev.usageThreshold)
			k.mu.Unlock()
			continue
		}
		k.mu.Unlock()

		efd, err := registerUsageThreshold(dir, value) // slow: no lock held
		if err != nil {
			k.dropMemcg(name)
			m.fallBack(SourceMemcg, name, reasonFor(err), err)
			continue
		}
		arm := &memcgArm{threshold: t, dir: dir, eventfd: efd, usageThreshold: value, above: above}
		k.mu.Lock()
		id, err := k.r.add(efd, unix.EPOLLIN, func(events uint32) { k.onMemcgEvent(arm, events) })
		if err != nil {
			k.mu.Unlock()
			unix.Close(efd)
			k.dropMemcg(name)
			m.fallBack(SourceMemcg, name, ReasonArmFailed, err)
			continue
		}
		arm.id = id
		// The new threshold is registered before the old one goes: no gap.
		prev = k.memcg[name]
		if prev != nil {
			arm.above = prev.above
			k.disarmMemcg(prev)
		}
		k.memcg[name] = arm
		k.noteSide(arm, above)
		if prev != nil {
			m.metrics.rearm()
			m.log.Debug("memcg threshold moved", "threshold", name, "memcg", dir,
				"from", prev.usageThreshold, "to", value, "inactiveFile", sample.InactiveFile)
		} else {
			m.log.Info("memcg threshold armed", "threshold", name, "memcg", dir,
				"usageThreshold", value, "capacity", sample.Capacity, "availableThreshold", available,
				"inactiveFile", sample.InactiveFile, "usage", sample.Usage)
		}
		m.setArmed(NotifierStatus{Source: SourceMemcg, Target: name, UsageThreshold: value,
			Detail: fmt.Sprintf("%s/memory.usage_in_bytes >= %d (capacity %d - threshold %d + inactive_file %d)",
				dir, value, sample.Capacity, available, sample.InactiveFile)})
		k.mu.Unlock()
	}
	k.mu.Lock()
	var gone []string
	for name := range k.memcg {
		if !wanted[name] {
			gone = append(gone, name)
		}
	}
	k.mu.Unlock()
	for _, name := range gone {
		k.dropMemcg(name)
		m.removeStatus(SourceMemcg, name)
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// noteSide wakes the loop when usage is on the other side of the threshold
// than last seen without the kernel having said so (the threshold moved past
// usage, or an event was coalesced away). Called with k.mu held.
func (k *kernelNotifiers) noteSide(arm *memcgArm, above bool) {
	if arm.above != above {
		arm.above = above
		k.m.deliver(SourceMemcg, arm.threshold.name())
	}
}

// onMemcgEvent runs on the reactor goroutine.
func (k *kernelNotifiers) onMemcgEvent(arm *memcgArm, events uint32) {
	name := arm.threshold.name()
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.disarmMemcg(arm)
		if k.memcg[name] == arm {
			delete(k.memcg, name)
			k.m.fallBack(SourceMemcg, name, ReasonFailed, fmt.Errorf("eventfd of memcg %s reported error (events %#x)", arm.dir, events))
		}
		return
	}
	// Drain before waking: a crossing signalled after the drain leaves the
	// eventfd readable and comes back as a new event; one signalled between
	// a wake and a later drain would be lost.
	arm.fdMu.Lock()
	var count uint64
	if !arm.closed {
		count = drainEventfd(arm.eventfd)
	}
	arm.fdMu.Unlock()
	if count == 0 {
		return
	}
	k.m.deliver(SourceMemcg, name)
	k.mu.Lock()
	defer k.mu.Unlock()
	// The kernel fires in both directions; remember which side usage is on.
	if usage, err := nodefs.ReadInt64(arm.dir + "/memory.usage_in_bytes"); err == nil {
		arm.above = usage >= arm.usageThreshold
	}
}

func (k *kernelNotifiers) dropMemcg(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if arm, ok := k.memcg[name]; ok {
		k.disarmMemcg(arm)
		delete(k.memcg, name)
	}
}

// disarmMemcg closes the eventfd, which unregisters the threshold in the
// kernel. Called with k.mu held.
func (k *kernelNotifiers) disarmMemcg(arm *memcgArm) {
	arm.fdMu.Lock()
	defer arm.fdMu.Unlock()
	if arm.closed {
		return
	}
	arm.closed = true
	k.r.remove(arm.eventfd, arm.id)
	unix.Close(arm.eventfd)
}

// registerUsageThreshold registers an eventfd that the kernel signals when
// dir's memory.usage_in_bytes crosses threshold, in either direction
// (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds").
func registerUsageThreshold(dir string, threshold int64) (int, error) {
	usagePath := dir + "/memory.usage_in_bytes"
	usage, err := os.Open(usagePath)
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", usagePath, err)
	}
	defer usage.Close()
	controlPath := dir + "/cgroup.event_control"
	control, err := os.OpenFile(controlPath, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		// The memcg exists (its usage file opened) but has no event control.
		return -1, fmt.Errorf("opening %s: %w: %w", controlPath, errUnsupported, err)
	}
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", controlPath, err)
	}
	defer control.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	// The fd numbers are those of this process; the kernel resolves them in
	// the writer's fd table during the write.
	line := fmt.Sprintf("%d %d %d", efd, usage.Fd(), threshold)
	if _, err := control.WriteString(line); err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("writing %q to %s: %w", line, controlPath, err)
	}
	return efd, nil
}
