// Package rtboost raises evictiond's threads to a real-time scheduling class
// (SCHED_FIFO) for the short moments when the brake may have to act, so that
// the reaction to a crossing does not wait behind CPU-bound pods for the CPU
// share a 100m request gives (docs/fast-path.md, "The brake on a busy node").
//
// The fast path asks for the boost (Hold) near and at a hard threshold; the
// boost ends Hold after the last request. Why every thread and not one: the
// crossing's path runs through several goroutines (the reactor's eventfd, the
// poll, the loop's pass, the freeze), and the Go runtime hands a woken
// goroutine from thread to thread; one real-time thread would still wait for
// the others' CPU at every hand-off. One thread is real-time between boosts
// too, the Sentinel: the one that waits on the kernel's notifications, so
// that the request for the boost at a memory crossing does not itself wait
// for a CPU.
//
// Bounds, so that a real-time evictiond can never starve the node:
//   - time: a boost lasts Hold past the last request and at most MaxBoost in
//     a row, then the threads rest in SCHED_OTHER for Rest;
//   - CPU: while boosted, the process may use MaxCPU of one CPU over each
//     CPUWindow (60 % of 100 ms); more, and every thread is lowered and the
//     rest starts (a pass takes 2-17 ms; a spinning goroutine is caught in
//     one or two windows);
//   - RLIMIT_RTTIME: a real-time thread that runs RTTimeSoft without blocking
//     gets SIGXCPU, on which every thread is lowered and the rest starts; at
//     RTTimeHard the kernel kills the process (the last resort). The Go
//     runtime preempts a goroutine every 10 ms and a locked thread then
//     sleeps for a moment, which restarts the kernel's count: these fire only
//     when the runtime itself cannot preempt (the CPU bound is the one that
//     catches a spinning goroutine);
//   - new threads start in SCHED_OTHER (SCHED_FLAG_RESET_ON_FORK);
//   - no CAP_SYS_NICE: Enable sets RLIMIT_RTPRIO to Priority (raising its
//     hard limit takes CAP_SYS_RESOURCE, which the agent holds for its PSI
//     triggers), under which the kernel lets a thread put itself, and the
//     processes of its own user, in SCHED_FIFO up to that priority and no
//     higher; the threads keep SCHED_FLAG_RESET_ON_FORK when lowered, since
//     clearing it would take CAP_SYS_NICE;
//   - on cgroup v1 with RT group scheduling (CONFIG_RT_GROUP_SCHED), the
//     kernel itself caps the group's real-time time at its cpu.rt_runtime_us
//     per cpu.rt_period_us: Grant gives evictiond's cgroup Budget of it (0 by
//     default, where SCHED_FIFO is refused with EPERM).
package rtboost

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults.
const (
	DefaultPriority   = 1
	DefaultHold       = time.Second
	DefaultMaxBoost   = 10 * time.Second
	DefaultRest       = 10 * time.Second
	DefaultRTTimeSoft = 200 * time.Millisecond
	DefaultRTTimeHard = 2 * time.Second
	DefaultMaxCPU     = 0.6
	DefaultCPUWindow  = 100 * time.Millisecond
	// DefaultBudget is the real-time time granted per cpu.rt_period_us (1 s by
	// default) to evictiond's cgroup where RT group scheduling needs it: 20 %
	// of each CPU. Past it the kernel stops the group's real-time threads for
	// the rest of the period, a stall worse than no boost: it must stay above
	// what the CPU bound lets through before it lowers the threads (60 % of a
	// CPU for one 100 ms window: 60 ms).
	DefaultBudget = 200 * time.Millisecond
	// rescanEvery: while boosted, threads the runtime started since the last
	// scan are raised at the next Hold at most this often.
	rescanEvery = 100 * time.Millisecond
	// schedOther is SCHED_OTHER (SCHED_NORMAL), which x/sys/unix does not name.
	schedOther = 0
)

// Options configure a Booster; zero values take the defaults.
type Options struct {
	Priority               int
	Hold, MaxBoost, Rest   time.Duration
	RTTimeSoft, RTTimeHard time.Duration
	// MaxCPU is the share of one CPU the process may use over each
	// CPUWindow while boosted.
	MaxCPU    float64
	CPUWindow time.Duration
	// ProcSelf is this process's /proc/self (default /proc/self): its task
	// directory lists the threads to raise.
	ProcSelf string
	Logger   *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Priority == 0 {
		o.Priority = DefaultPriority
	}
	if o.Hold == 0 {
		o.Hold = DefaultHold
	}
	if o.MaxBoost == 0 {
		o.MaxBoost = DefaultMaxBoost
	}
	if o.Rest == 0 {
		o.Rest = DefaultRest
	}
	if o.RTTimeSoft == 0 {
		o.RTTimeSoft = DefaultRTTimeSoft
	}
	if o.RTTimeHard == 0 {
		o.RTTimeHard = DefaultRTTimeHard
	}
	if o.MaxCPU == 0 {
		o.MaxCPU = DefaultMaxCPU
	}
	if o.CPUWindow == 0 {
		o.CPUWindow = DefaultCPUWindow
	}
	if o.ProcSelf == "" {
		o.ProcSelf = "/proc/self"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Booster raises and lowers this process's threads. Its methods are safe
// from any goroutine; a nil Booster does nothing.
type Booster struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	enabled   bool
	raised    bool
	since     time.Time // the boost's start
	until     time.Time // Hold past the last request
	restUntil time.Time
	lastScan  time.Time
	timer     *time.Timer
	xcpu      chan os.Signal
	stop      chan struct{}
	unusable  error // SCHED_FIFO refused: logged once, no further tries
	rtprioErr error // setting RLIMIT_RTPRIO failed (for the refusal's log)
	boosts    int
	overCPU   int // boosts ended by the CPU bound
	// sentinels are the threads kept in SCHED_FIFO between boosts too
	// (Sentinel); restTimer raises them again when a rest ends.
	sentinels map[int]bool
	restTimer *time.Timer
}

// New returns a disabled Booster; Enable turns it on.
func New(opts Options) *Booster {
	opts = opts.withDefaults()
	return &Booster{opts: opts, log: opts.Logger}
}

// Enable turns the boost on or off (a configuration reload). On, it sets
// RLIMIT_RTTIME and RLIMIT_RTPRIO and listens for SIGXCPU; off, it lowers
// every thread now. RLIMIT_RTPRIO refused (no CAP_SYS_RESOURCE to raise its
// hard limit) is not an error: with CAP_SYS_NICE the boost works without
// it, and without either the first boost is refused and logged.
func (b *Booster) Enable(on bool) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if on == b.enabled {
		return nil
	}
	if !on {
		b.enabled = false
		b.lowerLocked("disabled")
		signal.Stop(b.xcpu)
		close(b.stop)
		return nil
	}
	lim := unix.Rlimit{Cur: uint64(b.opts.RTTimeSoft / time.Microsecond), Max: uint64(b.opts.RTTimeHard / time.Microsecond)}
	if err := unix.Setrlimit(unix.RLIMIT_RTTIME, &lim); err != nil {
		return fmt.Errorf("rtboost: setting RLIMIT_RTTIME to %v soft / %v hard: %w", b.opts.RTTimeSoft, b.opts.RTTimeHard, err)
	}
	b.rtprioErr = raiseRTPrio(b.opts.Priority)
	b.enabled = true
	b.unusable = nil
	b.xcpu = make(chan os.Signal, 1)
	b.stop = make(chan struct{})
	signal.Notify(b.xcpu, syscall.SIGXCPU)
	go b.watchXCPU(b.xcpu, b.stop)
	b.raiseSentinelsLocked()
	return nil
}

// watchXCPU lowers every thread when one ran RTTimeSoft in real time without
// blocking: something spins, and it must not do so above every pod.
func (b *Booster) watchXCPU(xcpu <-chan os.Signal, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-xcpu:
			b.mu.Lock()
			b.log.Warn("realtime boost: a thread ran its RLIMIT_RTTIME soft limit without blocking; lowered to SCHED_OTHER for the rest period",
				"softLimit", b.opts.RTTimeSoft, "rest", b.opts.Rest)
			b.restLocked("RLIMIT_RTTIME")
			b.mu.Unlock()
		}
	}
}

// Hold asks for the boost for the next Hold: raised now unless resting or
// disabled, and kept while requests keep coming, up to MaxBoost in a row.
func (b *Booster) Hold() {
	if b == nil {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.enabled || b.unusable != nil || now.Before(b.restUntil) {
		return
	}
	b.until = now.Add(b.opts.Hold)
	if b.raised {
		if now.Sub(b.since) >= b.opts.MaxBoost {
			b.restLocked("maxBoost")
			return
		}
		if now.Sub(b.lastScan) >= rescanEvery {
			_ = b.raiseAllLocked(now)
		}
		return
	}
	if err := b.raiseAllLocked(now); err != nil {
		b.refuseLocked(err)
		return
	}
	b.raised, b.since = true, now
	b.boosts++
	go b.watchCPU(b.boosts)
	if b.timer == nil {
		b.timer = time.AfterFunc(b.opts.Hold, b.expire)
	} else {
		b.timer.Reset(b.opts.Hold)
	}
}

// watchCPU ends boost number n when the process uses more than MaxCPU of a
// CPU over a CPUWindow.
func (b *Booster) watchCPU(n int) {
	ticker := time.NewTicker(b.opts.CPUWindow)
	defer ticker.Stop()
	last, err := processCPU()
	if err != nil {
		return
	}
	budget := time.Duration(b.opts.MaxCPU * float64(b.opts.CPUWindow))
	for range ticker.C {
		now, err := processCPU()
		if err != nil {
			return
		}
		used := now - last
		last = now
		b.mu.Lock()
		if !b.raised || b.boosts != n {
			b.mu.Unlock()
			return
		}
		if used > budget {
			b.overCPU++
			b.log.Warn("realtime boost: the agent used more CPU than its bound while boosted; lowered to SCHED_OTHER for the rest period",
				"used", used, "window", b.opts.CPUWindow, "bound", budget, "rest", b.opts.Rest)
			b.restLocked("cpu")
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
}

// processCPU is the CPU time every thread of the process used so far.
func processCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// expire lowers the threads once Hold passed since the last request.
func (b *Booster) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.raised {
		return
	}
	if left := time.Until(b.until); left > 0 {
		b.timer.Reset(left)
		return
	}
	b.lowerLocked("idle")
	b.raiseSentinelsLocked()
}

// refuseLocked records that SCHED_FIFO is refused: every thread lowered,
// logged once, no further tries until the next Enable.
func (b *Booster) refuseLocked(err error) {
	b.unusable = err
	b.lowerLocked("refused")
	attrs := []any{"err", err}
	if b.rtprioErr != nil {
		attrs = append(attrs, "rlimitRTPRIO", b.rtprioErr)
	}
	b.log.Warn("realtime boost unavailable; the brake reacts with its CPU weight alone", attrs...)
}

// restLocked ends a boost that reached a bound (why): every thread, the
// sentinels too, in SCHED_OTHER for Rest; then the sentinels are raised
// again.
func (b *Booster) restLocked(why string) {
	b.lowerLocked(why)
	b.restUntil = time.Now().Add(b.opts.Rest)
	if b.restTimer != nil {
		b.restTimer.Stop()
	}
	b.restTimer = time.AfterFunc(b.opts.Rest, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.raised {
			b.raiseSentinelsLocked()
		}
	})
}

// Sentinel keeps the calling thread in SCHED_FIFO at Priority whenever the
// boost is enabled and not resting, between boosts too: the thread that
// waits on the kernel's notifications (internal/notify's reactor), so that
// its wake-up at a memory crossing runs at once, whatever holds the CPUs,
// and asks for the boost (Hold) before anything else of the agent must run.
// A boost that waited for that first wake-up to get a CPU at the pod's
// weight came 240-460 ms late on a node whose CPUs were all taken (make
// bench-ramp, busy setups with the host's CPUs taken too).
//
// The caller must have locked its goroutine to the thread
// (runtime.LockOSThread) and must spend its time blocked in the kernel; the
// bounds are the boost's: RLIMIT_RTTIME and the CPU bound lower it with
// every other thread, and it rests with them. release lowers the thread and
// forgets it; call it from the same thread (then end the goroutine without
// unlocking: its thread exits with it).
func (b *Booster) Sentinel() (release func()) {
	if b == nil {
		return func() {}
	}
	tid := unix.Gettid()
	b.mu.Lock()
	if b.sentinels == nil {
		b.sentinels = map[int]bool{}
	}
	b.sentinels[tid] = true
	b.raiseSentinelsLocked()
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.sentinels, tid)
		b.mu.Unlock()
		attr := loweredAttr()
		_ = unix.SchedSetAttr(tid, &attr, 0)
	}
}

// raiseSentinelsLocked puts the sentinels in SCHED_FIFO unless the boost is
// off, refused or resting. A refusal is the boost's (logged once).
func (b *Booster) raiseSentinelsLocked() {
	if !b.enabled || b.unusable != nil || time.Now().Before(b.restUntil) {
		return
	}
	attr := b.fifoAttr()
	for tid := range b.sentinels {
		err := unix.SchedSetAttr(tid, &attr, 0)
		switch {
		case errors.Is(err, unix.ESRCH):
			delete(b.sentinels, tid)
		case err != nil:
			b.refuseLocked(fmt.Errorf("sched_setattr(%d, SCHED_FIFO %d): %w", tid, b.opts.Priority, err))
			return
		}
	}
}

// Boosted reports whether the threads are raised now, and how many boosts
// started so far.
func (b *Booster) Boosted() (bool, int) {
	if b == nil {
		return false, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.raised, b.boosts
}

// raiseRTPrio lets this process's threads put themselves in a real-time
// class up to priority without CAP_SYS_NICE: RLIMIT_RTPRIO at least
// priority, soft and hard. Raising the hard limit takes CAP_SYS_RESOURCE.
func raiseRTPrio(priority int) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_RTPRIO, &lim); err != nil {
		return fmt.Errorf("rtboost: reading RLIMIT_RTPRIO: %w", err)
	}
	want := uint64(priority)
	if lim.Cur >= want {
		return nil
	}
	lim.Cur = want
	lim.Max = max(lim.Max, want)
	if err := unix.Setrlimit(unix.RLIMIT_RTPRIO, &lim); err != nil {
		return fmt.Errorf("rtboost: setting RLIMIT_RTPRIO to %d: %w", priority, err)
	}
	return nil
}

// raiseAllLocked puts every thread of the process in SCHED_FIFO at
// Priority, with SCHED_FLAG_RESET_ON_FORK. The first refusal is returned
// (EPERM: neither RLIMIT_RTPRIO nor CAP_SYS_NICE, or RT group scheduling
// with no budget).
func (b *Booster) raiseAllLocked(now time.Time) error {
	b.lastScan = now
	attr := b.fifoAttr()
	tids, err := b.tasks()
	if err != nil {
		return err
	}
	for _, tid := range tids {
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("sched_setattr(%d, SCHED_FIFO %d): %w", tid, b.opts.Priority, err)
		}
	}
	return nil
}

// lowerLocked puts every thread back in SCHED_OTHER. It keeps
// SCHED_FLAG_RESET_ON_FORK: a thread without CAP_SYS_NICE may not clear it
// (EPERM, and the thread would stay real-time).
func (b *Booster) lowerLocked(why string) {
	if tids, err := b.tasks(); err == nil {
		attr := loweredAttr()
		for _, tid := range tids {
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: exited
				b.log.Error("realtime boost: lowering a thread failed", "tid", tid, "err", err)
			}
		}
	}
	if b.raised {
		b.log.Debug("realtime boost ended", "why", why, "took", time.Since(b.since))
	}
	b.raised = false
}

// fifoAttr is SCHED_FIFO at Priority, reset on fork: what a raise sets.
func (b *Booster) fifoAttr() unix.SchedAttr {
	return unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(b.opts.Priority), Flags: unix.SCHED_FLAG_RESET_ON_FORK}
}

// loweredAttr is SCHED_OTHER keeping reset-on-fork (which a thread without
// CAP_SYS_NICE may not clear): what a lowering sets.
func loweredAttr() unix.SchedAttr {
	return unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: schedOther, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
}

func (b *Booster) tasks() ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(b.opts.ProcSelf, "task"))
	if err != nil {
		return nil, fmt.Errorf("listing this process's threads: %w", err)
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// Grant gives the cpu cgroup at dir (this process's, on a cgroup v1 cpu
// hierarchy mounted at root) budget of real-time time per cpu.rt_period_us,
// and every ancestor below root at least as much, top down (a child may not
// have more than its parent). Where the kernel has no RT group scheduling
// (no cpu.rt_runtime_us: cgroup v2, or CONFIG_RT_GROUP_SCHED off) it does
// nothing. It returns what it wrote, for the log.
func Grant(root, dir string, budget time.Duration) ([]string, error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("rtboost: cgroup %s is not under %s", dir, root)
	}
	if _, err := os.Stat(filepath.Join(root, "cpu.rt_runtime_us")); err != nil {
		return nil, nil // no RT group scheduling here
	}
	want := int64(budget / time.Microsecond)
	var wrote []string
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." || part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		file := filepath.Join(cur, "cpu.rt_runtime_us")
		data, err := os.ReadFile(file)
		if err != nil {
			return wrote, fmt.Errorf("rtboost: %w", err)
		}
		have, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return wrote, fmt.Errorf("rtboost: %s: %q: %w", file, data, err)
		}
		if have >= want || have < 0 { // -1: unlimited
			continue
		}
		if err := os.WriteFile(file, []byte(strconv.FormatInt(want, 10)), 0o644); err != nil {
			return wrote, fmt.Errorf("rtboost: writing %d to %s: %w", want, file, err)
		}
		wrote = append(wrote, fmt.Sprintf("%s=%d", file, want))
	}
	return wrote, nil
}

// OwnCPUCgroup is this process's cgroup in the v1 cpu hierarchy, from
// procSelf/cgroup ("" on cgroup v2 or without a cpu controller line).
func OwnCPUCgroup(procSelf string) (string, error) {
	data, err := os.ReadFile(filepath.Join(procSelf, "cgroup"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2], nil
			}
		}
	}
	return "", nil
}
