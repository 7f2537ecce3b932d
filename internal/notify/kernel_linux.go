//go:build linux

package notify

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/policy"
)

// kernelNotifiers is the state of the armed notifiers. Two goroutines use
// it: the arming one (runKernel: arm, re-arm, retry) and the reactor's
// serving one (event handlers). mu guards everything below it; lock order is
// kernelNotifiers.mu, then Manager.mu. The slow kernel calls of arming
// (registering a memcg threshold waits for an RCU grace period) run without
// mu, so they never delay an event.
type kernelNotifiers struct {
	m    *Manager
	r    *reactor
	mode CgroupMode

	mu    sync.Mutex
	memcg map[string]*memcgArm // by Threshold.name()
	psi   map[string]*psiArm   // by pressure file path
	// psiArmedWith: the trigger settings of the armed PSI triggers.
	psiArmedWith PSIOptions
	event        *memoryEventsWatch
}

// runKernel arms the notifiers, serves their events and re-arms every
// RearmInterval (and on request) until ctx is done.
func (m *Manager) runKernel(ctx context.Context) {
	mode := m.resolveMode()
	m.mu.Lock()
	m.mode = mode
	m.mu.Unlock()
	r, err := newReactor()
	if err != nil {
		// Without epoll no notifier can run: every one falls back.
		m.fallBackAll(mode, ReasonFailed, err)
		m.markArmed()
		<-ctx.Done()
		return
	}
	defer r.close()

	k := &kernelNotifiers{m: m, r: r, mode: mode, memcg: map[string]*memcgArm{}, psi: map[string]*psiArm{}}
	s := m.current()
	m.log.Info("arming kernel notifiers", "cgroupMode", mode, "cgroupRoot", m.opts.CgroupRoot,
		"kubepods", m.opts.KubepodsCgroup, "memcgThresholds", s.MemcgThresholds,
		"psi", s.PSI.Enabled, "memoryEvents", s.MemoryEvents)
	k.armAll()
	m.markArmed()

	var stopping atomic.Bool
	served := make(chan error, 1)
	go func() {
		if m.opts.Sentinel != nil {
			// The reactor's own thread, kept real-time between boosts: never
			// unlocked, so the thread ends with the goroutine.
			runtime.LockOSThread()
			defer m.opts.Sentinel()()
		}
		served <- r.serve(stopping.Load)
	}()
	defer func() {
		stopping.Store(true)
		r.kick()
		<-served
		k.closeAll()
	}()

	ticker := time.NewTicker(m.opts.RearmInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.rearmRequests:
			k.armAll()
		case <-ticker.C:
			k.armAll()
		case err := <-served:
			// epoll itself broke: nothing the kernel says can reach us any more.
			served <- nil // for the deferred shutdown
			k.closeAll()
			m.fallBackAll(mode, ReasonFailed, err)
			<-ctx.Done()
			return
		}
	}
}

// armAll (re)arms every notifier: memcg thresholds move with inactive_file,
// and notifiers that fell back are retried (the kubepods cgroup often appears
// after evictiond starts).
func (k *kernelNotifiers) armAll() {
	s := k.m.current()
	k.armMemcg(s)
	k.armPSI(s)
	k.armMemoryEvents(s)
}

func (k *kernelNotifiers) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, a := range k.memcg {
		k.disarmMemcg(a)
		delete(k.memcg, name)
	}
	for p, a := range k.psi {
		k.disarmPSI(a)
		delete(k.psi, p)
	}
	k.disarmMemoryEvents()
}

// resolveMode returns the configured mode, or detects it: cgroup2 mounted at
// CgroupRoot means the unified hierarchy.
func (m *Manager) resolveMode() CgroupMode {
	if m.opts.Mode != CgroupModeAuto {
		return m.opts.Mode
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.opts.CgroupRoot, &st); err != nil {
		m.log.Warn("cannot detect the cgroup mode, assuming v1", "cgroupRoot", m.opts.CgroupRoot, "err", err)
		return CgroupModeV1
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return CgroupModeV2
	}
	return CgroupModeV1
}

// fallBackAll marks every configured notifier as fallen back.
func (m *Manager) fallBackAll(mode CgroupMode, reason string, err error) {
	s := m.current()
	for _, t := range s.Thresholds {
		if s.MemcgThresholds && t.memory() {
			m.fallBack(SourceMemcg, t.name(), reason, err)
		}
	}
	if s.PSI.Enabled {
		m.fallBack(SourcePSI, m.nodePressurePath(), reason, err)
	}
	if s.MemoryEvents && mode == CgroupModeV2 {
		m.fallBack(SourceMemoryEvents, m.memoryEventsPath(), reason, err)
	}
}

// memcgDir is the v1 memcg a threshold watches.
func (m *Manager) memcgDir(t Threshold) (dir string, isRoot bool) {
	root := filepath.Join(m.opts.CgroupRoot, "memory")
	if t.Signal == policy.SignalAllocatableMemoryAvailable {
		return filepath.Join(root, m.opts.KubepodsCgroup), false
	}
	return root, true
}

func (m *Manager) nodePressurePath() string {
	return filepath.Join(m.opts.ProcRoot, "pressure", "memory")
}

// kubepodsUnifiedDir is the kubepods cgroup in the cgroup2 hierarchy: the
// root on v2, the "unified" mount of a hybrid v1 host.
func (m *Manager) kubepodsUnifiedDir(mode CgroupMode) string {
	if mode == CgroupModeV2 {
		return filepath.Join(m.opts.CgroupRoot, m.opts.KubepodsCgroup)
	}
	return filepath.Join(m.opts.CgroupRoot, "unified", m.opts.KubepodsCgroup)
}

func (m *Manager) memoryEventsPath() string {
	return filepath.Join(m.kubepodsUnifiedDir(CgroupModeV2), "memory.events")
}

// errUnsupported marks arming errors that mean the kernel or hierarchy lacks
// the interface (rather than a missing cgroup).
var errUnsupported = errors.New("not supported by this kernel or cgroup hierarchy")

// reasonFor classifies an arming error for the fallback metric.
func reasonFor(err error) string {
	switch {
	case errors.Is(err, errUnsupported), errors.Is(err, unix.EOPNOTSUPP):
		return ReasonUnsupported
	case errors.Is(err, unix.ENOENT):
		return ReasonNotFound
	}
	return ReasonArmFailed
}
