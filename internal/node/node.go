// Package node is the real node as the daemon sees it (daemon.Node),
// assembled in one place from the parts that read and act on the machine:
// the monitor (signals, pod usage and cgroups), the kernel fast path
// (notify: wake-ups and the fast readings), node-level reclaim and the local
// stop through the CRI (reclaim), and the brake (freeze, thaw, kill of a
// pod's cgroup). `evictiond simulate` implements the same interface on a
// scenario (internal/simulate).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/notify"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/reclaim"
	"github.com/evictiond/evictiond/internal/rtboost"
)

// Options build a node.
type Options struct {
	Paths
	// Metrics receives the parts' collectors.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Starting, if set, is told the step start-up is on (for /readyz).
	Starting func(step string)
	// Runtime is the CRI socket in use and how it was found (Paths.DetectRuntime),
	// reported by the monitor's node_info.
	Runtime monitor.RuntimeEndpoint
}

// Node is this machine's node: the loop's stats, the brake's freezer, the
// reclaimer and local stop, the fast path's wake-ups.
type Node struct {
	Stats
	paths         Paths
	log           *slog.Logger
	reclaimer     *reclaim.Reclaimer
	freezer       *brake.PodFreezer
	notifier      *notify.Manager
	notifyMetrics *notify.Metrics
	waker         *notify.Waker
	rt            *rtboost.Booster
	rtGranted     bool
	kubepods      string
	cleanups      []func()
}

// recentReadings is how many fast readings are kept between two passes (the
// brake's rate looks at the last few).
const recentReadings = 32

// Open builds the node for cfg and starts its goroutines (the image tracker,
// the monitor's housekeeping, the fast path); they run until ctx ends, and
// Close waits for those that must end first.
func Open(ctx context.Context, cfg *policy.Config, opts Options) (n *Node, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.Starting == nil {
		opts.Starting = func(string) {}
	}
	log := opts.Logger
	n = &Node{paths: opts.Paths, log: log}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.reclaimer, err = reclaim.New(n.reclaimOptions(cfg))
	if err != nil {
		return n, err
	}
	trackerCtx, stopTracker := context.WithCancel(ctx)
	trackerDone := make(chan struct{})
	go func() { n.reclaimer.RunImageTracker(trackerCtx, 0); close(trackerDone) }()
	// The tracker writes the state file: it stops before the runtime connection closes.
	n.cleanups = append(n.cleanups, func() { stopTracker(); <-trackerDone; _ = n.reclaimer.Close() })

	monCfg := opts.Paths.MonitorConfig()
	monCfg.MemoryFormula, monCfg.HousekeepingInterval = monitor.MemoryFormula(cfg.MemoryFormula), cfg.HousekeepingInterval
	monCfg.SignalReadErrors, monCfg.Logger = opts.Metrics.ObservationErr, log // monitor adds its component
	monCfg.RuntimeEndpoint = opts.Runtime
	// The monitor reads through reclaim's connection to the runtime: one for the agent.
	rt, err := n.reclaimer.RuntimeStats()
	if err == nil && cfg.Reclaim.CRIEndpoint == "" {
		err = errors.New("no runtime socket detected")
	}
	if err != nil {
		log.Warn("CRI unavailable for stats; imagefs read through cAdvisor, writable layers missing", "endpoint", cfg.Reclaim.CRIEndpoint, "err", err)
	} else {
		monCfg.Runtime = rt
	}
	opts.Starting("starting the monitor (embedded cAdvisor)")
	mon, err := monitor.New(monCfg)
	if err != nil {
		return n, err
	}
	mon.SetFilesystemThresholds(cfg.Thresholds)
	if err := mon.Start(ctx); err != nil {
		return n, fmt.Errorf("starting the monitor: %w", err)
	}
	n.cleanups = append(n.cleanups, func() { _ = mon.Stop() })
	opts.Metrics.Registry.MustRegister(mon.Collectors()...)
	// The fast poll's readings are kept for the brake's rate (FastReadings).
	n.Stats = Stats{M: mon, Recent: NewRecentReadings(recentReadings)}
	n.freezer = brake.NewPodFreezer(mon.PodCgroup)

	n.rt = rtboost.New(rtboost.Options{Logger: log.With("component", "rtboost")})
	n.applyRealtime(cfg)
	n.cleanups = append(n.cleanups, func() { _ = n.rt.Enable(false) })
	n.waker = notify.NewWaker()
	n.notifyMetrics = notify.NewMetrics()
	opts.Metrics.Registry.MustRegister(n.notifyMetrics.Collectors()...)
	// The notifier takes the cgroup relative to the hierarchy's mount.
	n.kubepods = strings.TrimPrefix(mon.CgroupInfo().Kubepods, "/")
	n.notifier, err = notify.New(n.notifyOptions(cfg), n.waker)
	if err != nil {
		return n, err
	}
	go func() {
		if err := n.notifier.Run(ctx); err != nil {
			log.Error("fast path stopped; the loop's ticker remains", "err", err)
		}
	}()
	return n, nil
}

// Close stops what Open started and waits for it, last first; the fast
// path ends with Open's context.
func (n *Node) Close() {
	for i := len(n.cleanups) - 1; i >= 0; i-- {
		n.cleanups[i]()
	}
	n.cleanups = nil
}

// Reconfigure applies a reloaded configuration: dry run for reclaim, the fast
// path's thresholds. What only a restart applies is named by the daemon.
func (n *Node) Reconfigure(c *policy.Config) {
	n.reclaimer.SetDryRun(c.DryRun)
	n.Stats.M.SetFilesystemThresholds(c.Thresholds)
	n.applyRealtime(c)
	if err := n.notifier.Reconfigure(n.notifyOptions(c)); err != nil {
		n.log.Error("fast path not reconfigured", "err", err)
	}
}

// Wake is the fast path's wake-ups of the loop.
func (n *Node) Wake() <-chan struct{} { return n.waker.C() }

// Ready says whether the CRI answers (for /readyz).
func (n *Node) Ready(ctx context.Context) error { return n.reclaimer.Ready(ctx) }

// Reclaim runs one node-level reclaim step through the CRI.
func (n *Node) Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	return n.reclaimer.Reclaim(ctx, step, signal, need, live)
}

// StopPodSandboxByPodUID is the local stop (the API server unreachable): a
// pod the brake holds frozen is killed first (brake.KillBeforeStop).
func (n *Node) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error {
	return brake.KillBeforeStop{Stopper: n.reclaimer, Freezer: n.freezer}.StopPodSandboxByPodUID(ctx, uid)
}

// Freeze freezes the pod's cgroup for at most maxFreeze.
func (n *Node) Freeze(pod *v1.Pod, maxFreeze time.Duration) (brake.Hold, error) {
	return n.freezer.Freeze(pod, maxFreeze)
}

// Thaw ends the pod's hold.
func (n *Node) Thaw(uid types.UID) (brake.Hold, bool, error) { return n.freezer.Thaw(uid) }

// Kill ends the pod's hold by killing its tasks.
func (n *Node) Kill(uid types.UID, timeout time.Duration) (brake.Hold, int, bool, error) {
	return n.freezer.Kill(uid, timeout)
}

// Held lists the holds, oldest first.
func (n *Node) Held() []brake.Hold { return n.freezer.Held() }

// OnBrakeExpired sets what runs when a hold reached brake.maxFreeze and was
// thawed (on a timer goroutine).
func (n *Node) OnBrakeExpired(fn func(brake.Hold, error)) { n.freezer.OnExpire(fn) }

func (n *Node) reclaimOptions(c *policy.Config) reclaim.Options {
	return reclaim.Options{RuntimeEndpoint: c.Reclaim.CRIEndpoint, ImageMinimumAge: c.Reclaim.ImageMinAge, StateFile: c.Reclaim.ImageStateFile,
		PinnedImages: c.Reclaim.PinnedImages, HostRoot: n.paths.HostRoot, NodeFsPath: n.paths.KubeletRootDir, PodLogsDir: n.paths.PodLogsDir,
		DryRun: c.DryRun, Logger: n.log} // reclaim adds its component
}

// notifyOptions arms the fast path on kubepods, the cgroup the monitor
// resolved from --cgroup-root and --cgroup-driver (e.g. kubepods, or
// custom-root/kubepods), so both watch the same memcg. The poll reads memory
// and pid.available (the signals a ramp can exhaust between two ticks)
// through ObserveFast, which keeps them for the brake's rate.
func (n *Node) notifyOptions(c *policy.Config) notify.Options {
	opts := notify.OptionsFromConfig(c)
	opts.CgroupRoot = filepath.Join(n.paths.HostRoot, "/sys/fs/cgroup")
	// The agent's own procfs, not the host mount's: PSI triggers are armed by writing
	// /proc/pressure/memory, and the chart mounts the host's /proc recursively read-only
	// (its core_pattern, sysrq-trigger). PSI and meminfo are the node's in any PID namespace.
	opts.ProcRoot = notify.DefaultProcRoot
	opts.KubepodsCgroup = n.kubepods
	opts.ReadMemory = func() (policy.Observations, error) { return n.ObserveFast(), nil }
	opts.Logger, opts.Metrics = n.log, n.notifyMetrics // notify adds its component
	opts.Urgent, opts.Sentinel = n.rt.Hold, n.rt.Sentinel
	return opts
}

// applyRealtime turns the realtime boost on or off (brake.realtime.enabled,
// only with the brake). On cgroup v1 with RT group scheduling it first gives
// evictiond's cpu cgroup its real-time budget (rtboost.Grant), once.
func (n *Node) applyRealtime(c *policy.Config) {
	on := c.Brake.Enabled && c.Brake.Realtime
	if on && !n.rtGranted {
		root := filepath.Join(n.paths.HostRoot, "/sys/fs/cgroup/cpu")
		own, err := rtboost.OwnCPUCgroup("/proc/self")
		if err == nil && own != "" {
			var wrote []string
			wrote, err = rtboost.Grant(root, filepath.Join(root, own), rtboost.DefaultBudget)
			if len(wrote) > 0 {
				n.log.Info("realtime boost: real-time budget granted to evictiond's cgroup (RT group scheduling)", "wrote", strings.Join(wrote, " "))
			}
		}
		if err != nil {
			n.log.Warn("realtime boost: no real-time budget for evictiond's cgroup; SCHED_FIFO will likely be refused", "err", err)
		}
		n.rtGranted = true
	}
	if err := n.rt.Enable(on); err != nil {
		n.log.Warn("realtime boost off", "err", err)
	}
}
