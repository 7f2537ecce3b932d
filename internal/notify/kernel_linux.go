//go:build linux

package notify

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/policy"
)

// kernelNotifiers is the state of the armed notifiers. It is owned by the
// goroutine running runKernel: no locks.
type kernelNotifiers struct {
	m     *Manager
	r     *reactor
	mode  CgroupMode
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
	r, err := newReactor()
	if err != nil {
		// Without epoll no notifier can run: every one falls back.
		m.fallBackAll(mode, ReasonFailed, err)
		m.markArmed()
		<-ctx.Done()
		return
	}
	defer r.close()
	m.mu.Lock()
	m.mode = mode
	m.kick = r.kick
	m.mu.Unlock()
	defer func() {
		// Before the reactor's fds close: a later Rearm must not write to a
		// closed (and maybe reused) fd number.
		m.mu.Lock()
		m.kick = func() {}
		m.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, r.kick)
	defer stop()

	k := &kernelNotifiers{m: m, r: r, mode: mode, memcg: map[string]*memcgArm{}, psi: map[string]*psiArm{}}
	defer k.closeAll()
	s := m.current()
	m.log.Info("arming kernel notifiers", "cgroupMode", mode, "cgroupRoot", m.opts.CgroupRoot,
		"kubepods", m.opts.KubepodsCgroup, "memcgThresholds", s.MemcgThresholds,
		"psi", s.PSI.Enabled, "memoryEvents", s.MemoryEvents)
	k.armAll()
	m.markArmed()

	next := time.Now().Add(m.opts.RearmInterval)
	for ctx.Err() == nil {
		if err := r.wait(time.Until(next)); err != nil {
			// epoll itself broke: nothing the kernel says can reach us any more.
			m.fallBackAll(mode, ReasonFailed, err)
			<-ctx.Done()
			return
		}
		rearm := false
		select {
		case <-m.rearmRequests:
			rearm = true
		default:
		}
		if rearm || !time.Now().Before(next) {
			k.armAll()
			next = time.Now().Add(m.opts.RearmInterval)
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
	for name, a := range k.memcg {
		k.disarmMemcg(a)
		delete(k.memcg, name)
	}
	for p, a := range k.psi {
		k.disarmPSI(a)
		delete(k.psi, p)
	}
	if k.event != nil {
		k.disarmMemoryEvents()
	}
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
		if s.MemcgThresholds {
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
