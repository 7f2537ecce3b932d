package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/configfile"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/metricsserver"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/notify"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/reclaim"
)

func init() { commands["run"] = runRun }

// runFlags are the daemon's command line; everything else is in the config file.
type runFlags struct {
	config, kubeconfig, nodeName, hostRoot string
	serving                                metricsserver.Flags
	kubeletRoot, podLogs, imageFsDir       string
	cgroupDriver, cgroupRoot               string
	selfUID                                string
	dryRun, debug                          bool
}

func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &runFlags{}
	fs.StringVar(&f.config, "config", "/etc/evictiond/config.yaml", "EvictionConfiguration file (a mounted ConfigMap); reloaded on change")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	fs.StringVar(&f.selfUID, "pod-uid", os.Getenv("POD_UID"), "evictiond's own pod UID, never evicted (default $POD_UID)")
	fs.StringVar(&f.hostRoot, "host-root", "", "where the host's root is mounted (e.g. /host in the DaemonSet); prefixes /proc, /sys, the kubelet root and /var/log/pods")
	f.serving.AddFlags(fs)
	fs.StringVar(&f.kubeletRoot, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's root dir (nodefs)")
	fs.StringVar(&f.podLogs, "pod-logs-dir", "/var/log/pods", "the kubelet's pod log dir")
	fs.StringVar(&f.imageFsDir, "image-fs-dir", "/var/lib/containerd", "the runtime's image store, read when the CRI cannot say")
	fs.StringVar(&f.cgroupDriver, "cgroup-driver", "cgroupfs", "the kubelet's cgroup driver: cgroupfs or systemd")
	fs.StringVar(&f.cgroupRoot, "cgroup-root", "/", "the kubelet's --cgroup-root")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide and report (logs, Events, metrics) without evicting, reclaiming or writing node status; overrides dryRun in the config")
	fs.BoolVar(&f.debug, "debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if f.nodeName == "" {
		return nil, errors.New("--node-name: value \"\": required (or $NODE_NAME)")
	}
	if err := f.serving.Validate(); err != nil {
		return nil, err
	}
	switch f.cgroupDriver {
	case "cgroupfs", "systemd":
	default:
		return nil, fmt.Errorf("--cgroup-driver: value %q: must be cgroupfs or systemd", f.cgroupDriver)
	}
	return f, nil
}

func runRun(args []string, stdout, stderr io.Writer) int {
	f, err := parseRunFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "evictiond run: %v\n", err)
		return 2
	}
	level := slog.LevelInfo
	if f.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", f.nodeName)
	slog.SetDefault(log)
	klog.SetSlogLogger(log) // client-go and cAdvisor log through klog

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runDaemon(ctx, f, log); err != nil {
		log.Error("evictiond stopped", "err", err)
		return 1
	}
	log.Info("evictiond stopped")
	return 0
}

// runDaemon wires the parts and runs until ctx ends.
func runDaemon(ctx context.Context, f *runFlags, log *slog.Logger) error {
	// Parts run until ctx ends and some cleanups wait for them (the informers'
	// Shutdown does), so ctx is cancelled before the cleanups run, on every
	// return path: an error at start-up must not leave the process hanging.
	ctx, cancel := context.WithCancel(ctx)
	var cleanups []func()
	defer func() {
		cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	cfg, data, err := configfile.Load(f.config)
	if err != nil {
		// At start there is no last good configuration to fall back on.
		return fmt.Errorf("configuration %s:\n%w", f.config, err)
	}
	applyFlagOverrides(cfg, f)
	for _, w := range cfg.Warnings {
		log.Warn("configuration warning", "warning", w)
	}
	m := metrics.New()

	restCfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	reach := &kube.Reachability{}
	restCfg.Wrap(reach.Wrap)
	restCfg.UserAgent = "evictiond"
	setClientLimits(restCfg)
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}

	// Serve from the start: /metrics at once, /healthz alive, /readyz naming
	// the step start-up waits on (the informers wait for the API server, which
	// may be down when the node reboots), so a slow start is not a liveness
	// failure and the kubelet does not restart the agent in a loop.
	var startStep atomic.Value
	startStep.Store("configuration loaded")
	starting := agent.Check{Name: "startup", Fn: func(context.Context) error {
		return fmt.Errorf("starting: %s", startStep.Load())
	}}
	var handler atomic.Pointer[http.Handler]
	startupHandler := agent.Handler(m.Registry, nil, []agent.Check{starting})
	handler.Store(&startupHandler)
	srv, err := metricsserver.Start(ctx, metricsserver.Options{Flags: f.serving, Client: client, Host: f.nodeName, Log: log,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) })})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	})

	rc, err := reclaim.New(reclaimOptions(cfg, f, log))
	if err != nil {
		return err
	}
	// In the background: a runtime that is down or slow must not hold the start.
	go checkRuntimeCgroupDriver(ctx, rc, f.cgroupDriver, log)
	trackerCtx, stopTracker := context.WithCancel(ctx)
	trackerDone := make(chan struct{})
	go func() { rc.RunImageTracker(trackerCtx, 0); close(trackerDone) }()
	// The tracker writes the state file: it stops before the runtime connection closes.
	cleanups = append(cleanups, func() { stopTracker(); <-trackerDone; _ = rc.Close() })

	monCfg := monitor.Config{HostRoot: f.hostRoot, KubeletRootDir: f.kubeletRoot, PodLogsDir: f.podLogs, ImageFsDir: f.imageFsDir,
		CgroupDriver: monitor.CgroupDriver(f.cgroupDriver), CgroupRoot: f.cgroupRoot,
		MemoryFormula: monitor.MemoryFormula(cfg.MemoryFormula), HousekeepingInterval: cfg.HousekeepingInterval,
		SignalReadErrors: m.ObservationErr, Logger: log.With("component", "monitor")}
	rt, closeRT, err := monitor.DialCRI(cfg.Reclaim.CRIEndpoint)
	if err != nil {
		log.Warn("CRI unavailable for stats; imagefs read through cAdvisor, writable layers missing", "endpoint", cfg.Reclaim.CRIEndpoint, "err", err)
	} else {
		cleanups = append(cleanups, func() { _ = closeRT() })
		monCfg.Runtime = rt
	}
	startStep.Store("starting the monitor (embedded cAdvisor)")
	mon, err := monitor.New(monCfg)
	if err != nil {
		return err
	}
	if err := mon.Start(ctx); err != nil {
		return fmt.Errorf("starting the monitor: %w", err)
	}
	cleanups = append(cleanups, func() { _ = mon.Stop() })
	m.Registry.MustRegister(mon.Collectors()...)

	waker := notify.NewWaker()
	notifyMetrics := notify.NewMetrics()
	m.Registry.MustRegister(notifyMetrics.Collectors()...)
	// The notifier takes the cgroup relative to the hierarchy's mount.
	kubepods := strings.TrimPrefix(mon.CgroupInfo().Kubepods, "/")
	// The poll reads memory and pid.available: the signals a ramp can exhaust between two ticks.
	// The fast poll's readings are kept for the brake's rate (FastHistory).
	stats := daemon.MonitorStats{M: mon, Recent: daemon.NewRecentReadings(32)}
	readMemory := func() (policy.Observations, error) { return stats.ObserveFast(), nil }
	nm, err := notify.New(notifyOptions(cfg, f, kubepods, readMemory, notifyMetrics, log), waker)
	if err != nil {
		return err
	}
	go func() {
		if err := nm.Run(ctx); err != nil {
			log.Error("fast path stopped; the loop's ticker remains", "err", err)
		}
	}()

	startStep.Store("waiting for the pod and node informers to sync with the API server")
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client, Stats: stats, Reclaimer: rc, Metrics: m,
		APIReachable: reach.Reachable, Wake: waker.C(), Freezer: brake.NewPodFreezer(mon.PodCgroup),
		OnConfig: func(c *policy.Config) {
			if err := nm.Reconfigure(notifyOptions(c, f, kubepods, readMemory, notifyMetrics, log)); err != nil {
				log.Error("fast path not reconfigured", "err", err)
			}
		}}, daemon.Options{NodeName: f.nodeName, SelfUID: types.UID(f.selfUID), NodeStatus: true, Logger: log})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped during start-up", "step", startStep.Load())
			return nil // SIGTERM before the API server answered: a clean stop
		}
		return err
	}
	cleanups = append(cleanups, d.Close)

	m.ConfigLastReloadSuccessful.Set(1)
	m.ConfigLastReloadTime.SetToCurrentTime()
	// Both results exist from the start, so increase() and alerts see the first rejection.
	m.ConfigReloads.WithLabelValues("success")
	m.ConfigReloads.WithLabelValues("rejected")

	watcher := &configfile.Watcher{Path: f.config, Log: log.With("component", "config"),
		Apply: func(c *policy.Config) {
			applyFlagOverrides(c, f)
			m.ConfigReloads.WithLabelValues("success").Inc()
			m.ConfigLastReloadSuccessful.Set(1)
			m.ConfigLastReloadTime.SetToCurrentTime()
			log.Info("configuration reloaded", "path", f.config)
			for _, w := range c.Warnings {
				log.Warn("configuration warning", "warning", w)
			}
			d.Reload(c)
		},
		Reject: func(err error) {
			m.ConfigReloads.WithLabelValues("rejected").Inc()
			m.ConfigLastReloadSuccessful.Set(0)
			problems := strings.Split(err.Error(), "\n")
			log.Error("configuration rejected; the previous configuration stays in force", "path", f.config, "problems", problems)
			d.Recorder().Eventf(kube.NodeRef(f.nodeName), v1.EventTypeWarning, "ConfigRejected",
				"evictiond rejected %s; the previous configuration stays in force: %s", filepath.Base(f.config), strings.Join(problems, "; "))
		}}
	watcher.Seed(data)
	go watcher.Run(ctx)

	interval := cfg.LoopInterval
	live := []agent.Check{d.Agent.Live(2*time.Minute + 2*cfg.PodCleanupTimeout)}
	ready := []agent.Check{
		d.Agent.StatsFresh(10*interval + 2*cfg.PodCleanupTimeout + 10*time.Second),
		agent.CachedCheck("apiserver", 5*time.Second, func(ctx context.Context) error { return reach.Check(ctx, client) }),
		agent.CachedCheck("cri", 10*time.Second, rc.Ready),
	}
	running := agent.Handler(m.Registry, live, ready)
	handler.Store(&running)

	log.Info("evictiond running", "config", f.config, "thresholds", len(cfg.Thresholds), "dryRun", cfg.DryRun,
		"hostRoot", f.hostRoot, "metrics", srv.MetricsAddr.String(), "health", srv.HealthAddr.String())
	d.Run(ctx) // returns on SIGTERM
	return nil
}

// applyFlagOverrides: --dry-run wins over the file.
func applyFlagOverrides(c *policy.Config, f *runFlags) {
	if f.dryRun {
		c.DryRun = true
	}
}

// The API client's own rate limit (client-go's token bucket, per agent). An
// agent's heaviest second is the start of a hard-pressure episode: its
// condition, its taint, the eviction, and two or three Events; it needs no
// more than the burst and then almost nothing (docs/scale.md, make
// bench-fleet). The limit is a per-node safety net against a loop gone wrong,
// not what protects the API server from a fleet: API priority and fairness
// does that, for every node at once.
const (
	clientQPS   = 5
	clientBurst = 10
)

func setClientLimits(c *rest.Config) {
	c.QPS, c.Burst = clientQPS, clientBurst
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster API config (use --kubeconfig outside a pod): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

func reclaimOptions(c *policy.Config, f *runFlags, log *slog.Logger) reclaim.Options {
	return reclaim.Options{RuntimeEndpoint: c.Reclaim.CRIEndpoint, ImageMinimumAge: c.Reclaim.ImageMinAge, StateFile: c.Reclaim.ImageStateFile,
		PinnedImages: c.Reclaim.PinnedImages, HostRoot: f.hostRoot, NodeFsPath: f.kubeletRoot, PodLogsDir: f.podLogs,
		DryRun: c.DryRun, Logger: log} // reclaim adds its component
}

// checkRuntimeCgroupDriver warns when the runtime's cgroup driver is not --cgroup-driver. With
// containerd 2 the kubelet takes its driver from the runtime (CRI RuntimeConfig), not from its
// own configuration, so a flag set to match the kubelet's configuration can still name the wrong
// layout: the monitor would then find no pod cgroups. containerd 1.x does not answer: nothing is
// checked.
func checkRuntimeCgroupDriver(ctx context.Context, rc *reclaim.Reclaimer, flagDriver string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	driver, err := rc.RuntimeCgroupDriver(ctx)
	switch {
	case err != nil:
		log.Debug("runtime cgroup driver unknown", "err", err)
	case driver == "":
		log.Debug("runtime does not report its cgroup driver (CRI RuntimeConfig)", "cgroupDriver", flagDriver)
	case driver != flagDriver:
		log.Warn("the runtime reports another cgroup driver than --cgroup-driver; the kubelet uses the runtime's: set --cgroup-driver to it",
			"runtimeCgroupDriver", driver, "cgroupDriver", flagDriver)
	default:
		log.Info("runtime cgroup driver matches --cgroup-driver", "cgroupDriver", driver)
	}
}

// notifyOptions arms the fast path on kubepods, the cgroup the monitor
// resolved from --cgroup-root and --cgroup-driver (e.g. kubepods, or
// custom-root/kubepods), so both watch the same memcg.
func notifyOptions(c *policy.Config, f *runFlags, kubepods string, read notify.MemoryReader, nm *notify.Metrics, log *slog.Logger) notify.Options {
	opts := notify.OptionsFromConfig(c)
	opts.CgroupRoot = filepath.Join(f.hostRoot, "/sys/fs/cgroup")
	opts.ProcRoot = filepath.Join(f.hostRoot, "/proc")
	opts.KubepodsCgroup = kubepods
	opts.ReadMemory, opts.Logger, opts.Metrics = read, log, nm // notify adds its component
	return opts
}
