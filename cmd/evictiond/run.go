package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/configfile"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/notify"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/reclaim"
)

func init() { commands["run"] = runRun }

// runFlags are the daemon's command line; everything else is in the config file.
type runFlags struct {
	config, kubeconfig, nodeName, hostRoot, metricsAddr string
	kubeletRoot, podLogs, imageFsDir                    string
	cgroupDriver, cgroupRoot                            string
	selfUID                                             string
	dryRun, debug                                       bool
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
	fs.StringVar(&f.metricsAddr, "metrics-address", ":9809", "address of /metrics, /healthz and /readyz")
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

	// Serve from the start: /metrics at once, /healthz alive, /readyz naming
	// the step start-up waits on (the informers wait for the API server, which
	// may be down when the node reboots), so a slow start is not a liveness
	// failure and the kubelet does not restart the agent in a loop.
	lis, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-address %s: %w", f.metricsAddr, err)
	}
	var startStep atomic.Value
	startStep.Store("configuration loaded")
	starting := agent.Check{Name: "startup", Fn: func(context.Context) error {
		return fmt.Errorf("starting: %s", startStep.Load())
	}}
	var handler atomic.Pointer[http.Handler]
	startupHandler := agent.Handler(m.Registry, nil, []agent.Check{starting})
	handler.Store(&startupHandler)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }),
		ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	cleanups = append(cleanups, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})

	restCfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	reach := &reachability{}
	restCfg.Wrap(reach.wrap)
	restCfg.UserAgent = "evictiond"
	setClientLimits(restCfg)
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}

	informers, err := kube.NewNodeInformers(client, f.nodeName, 0)
	if err != nil {
		return err
	}
	startStep.Store("waiting for the pod and node informers to sync with the API server")
	if err := informers.Start(ctx); err != nil {
		if ctx.Err() != nil {
			log.Info("stopped during start-up", "step", startStep.Load())
			return nil // SIGTERM before the API server answered: a clean stop
		}
		return fmt.Errorf("node informers: %w", err)
	}
	cleanups = append(cleanups, informers.Shutdown)
	recorder, stopRecorder := kube.NewEventRecorder(ctx, client, f.nodeName)
	cleanups = append(cleanups, stopRecorder)

	rc, err := startReclaimer(ctx, reclaimOptions(cfg, f, log))
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() { rc.current().stop() })

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

	status, err := startNodeStatus(ctx, client, informers, recorder, nodeStatusOptions(cfg, f, log))
	if err != nil {
		return err
	}
	sink := &statusSink{s: status}
	cleanups = append(cleanups, func() { sink.s.stop() })
	sink.update(cfg)

	evictor, err := kube.NewEvictor(client, informers.Pods, recorder, evictorOptions(cfg, f, rc, log))
	if err != nil {
		return err
	}
	ev := &kubeEvictor{e: evictor, apiReachable: reach.reachable}

	waker := notify.NewWaker()
	notifyMetrics := notify.NewMetrics()
	m.Registry.MustRegister(notifyMetrics.Collectors()...)
	// The notifier takes the cgroup relative to the hierarchy's mount.
	kubepods := strings.TrimPrefix(mon.CgroupInfo().Kubepods, "/")
	readMemory := func() (policy.Observations, error) { return mon.ObserveMemory().Observations, nil }
	nm, err := notify.New(notifyOptions(cfg, f, kubepods, readMemory, notifyMetrics, log), waker)
	if err != nil {
		return err
	}
	go func() {
		if err := nm.Run(ctx); err != nil {
			log.Error("fast path stopped; the loop's ticker remains", "err", err)
		}
	}()

	deps := agent.Deps{Stats: monitorStats{m: mon}, Pods: informerPods{informers}, Status: sink,
		Evictor: ev, Reclaimer: criReclaimer{rc}, Recorder: recorder, Metrics: m}
	prev := cfg
	var a *agent.Agent
	a = agent.New(cfg, deps, agent.Options{NodeName: f.nodeName, SelfUID: types.UID(f.selfUID), Wake: waker.C(), Logger: log.With("component", "loop"),
		OnConfig: func(c *policy.Config) {
			// Runs in the loop goroutine: rebuild what depends on the configuration.
			if c.DryRun != rc.current().dryRun {
				// Reclaim and node status fix their dry-run mode at construction: a
				// file switching dryRun must switch them too, or "dryRun: true" would
				// leave image GC deleting.
				opts := reclaimOptions(cfg, f, log) // reclaim.* changes wait for a restart
				opts.DryRun = c.DryRun
				if err := rc.swap(ctx, opts); err != nil {
					log.Error("reclaim not switched to the new dryRun; keeping the previous reclaimer", "dryRun", c.DryRun, "err", err)
				}
			}
			if !c.DryRun && (sink.s.dryRun || nodeStatusChanged(prev, c)) {
				// A new writer reconciles the node from scratch: what the old settings
				// published and the new ones do not is released on its first sync.
				if next, err := startNodeStatus(ctx, client, informers, recorder, nodeStatusOptions(c, f, log)); err != nil {
					log.Error("node status writer not rebuilt for the new settings", "err", err)
				} else {
					sink.swap(next)
				}
			}
			if evictorChanged(prev, c) {
				// Rebuilt only on change: the evictor holds the token bucket, the
				// cool-down and the queue of local stops to report.
				if e, err := kube.NewEvictor(client, informers.Pods, recorder, evictorOptions(c, f, rc, log)); err != nil {
					log.Error("evictor not rebuilt; keeping the previous one", "err", err)
				} else {
					ev.e = e
				}
			}
			if err := nm.Reconfigure(notifyOptions(c, f, kubepods, readMemory, notifyMetrics, log)); err != nil {
				log.Error("fast path not reconfigured", "err", err)
			}
			sink.update(c)
			prev = c
			if restartOnly := restartOnlyChanges(cfg, c); restartOnly != "" {
				log.Warn("configuration changes that take effect on restart", "fields", restartOnly)
			}
		}})
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
			a.Reload(c)
		},
		Reject: func(err error) {
			m.ConfigReloads.WithLabelValues("rejected").Inc()
			m.ConfigLastReloadSuccessful.Set(0)
			problems := strings.Split(err.Error(), "\n")
			log.Error("configuration rejected; the previous configuration stays in force", "path", f.config, "problems", problems)
			recorder.Eventf(kube.NodeRef(f.nodeName), v1.EventTypeWarning, "ConfigRejected",
				"evictiond rejected %s; the previous configuration stays in force: %s", filepath.Base(f.config), strings.Join(problems, "; "))
		}}
	watcher.Seed(data)
	go watcher.Run(ctx)

	interval := cfg.LoopInterval
	live := []agent.Check{a.Live(2*time.Minute + 2*cfg.PodCleanupTimeout)}
	ready := []agent.Check{
		a.StatsFresh(10*interval + 2*cfg.PodCleanupTimeout + 10*time.Second),
		agent.CachedCheck("apiserver", 5*time.Second, func(ctx context.Context) error { return reach.check(ctx, client) }),
		agent.CachedCheck("cri", 10*time.Second, func(ctx context.Context) error { return rc.current().r.Ready(ctx) }),
	}
	running := agent.Handler(m.Registry, live, ready)
	handler.Store(&running)

	log.Info("evictiond running", "config", f.config, "thresholds", len(cfg.Thresholds), "dryRun", cfg.DryRun,
		"hostRoot", f.hostRoot, "metrics", lis.Addr().String())
	a.Run(ctx) // returns on SIGTERM
	return nil
}

// applyFlagOverrides: --dry-run wins over the file.
func applyFlagOverrides(c *policy.Config, f *runFlags) {
	if f.dryRun {
		c.DryRun = true
	}
}

// restartOnlyChanges names settings a reload cannot apply to running parts.
func restartOnlyChanges(old, next *policy.Config) string {
	var out []string
	if old.HousekeepingInterval != next.HousekeepingInterval {
		out = append(out, "stats.housekeepingInterval")
	}
	if old.MemoryFormula != next.MemoryFormula {
		out = append(out, "stats.memoryFormula")
	}
	if old.Reclaim.CRIEndpoint != next.Reclaim.CRIEndpoint || old.Reclaim.ImageStateFile != next.Reclaim.ImageStateFile ||
		old.Reclaim.ImageMinAge != next.Reclaim.ImageMinAge || strings.Join(old.Reclaim.PinnedImages, ",") != strings.Join(next.Reclaim.PinnedImages, ",") {
		out = append(out, "reclaim.*")
	}
	return strings.Join(out, ", ")
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
	minAge := c.Reclaim.ImageMinAge
	if minAge == 0 {
		minAge = -1 // 0s in the config means no minimum; reclaim's zero means its default
	}
	return reclaim.Options{RuntimeEndpoint: c.Reclaim.CRIEndpoint, ImageMinimumAge: minAge, StateFile: c.Reclaim.ImageStateFile,
		PinnedImages: c.Reclaim.PinnedImages, HostRoot: f.hostRoot, NodeFsPath: f.kubeletRoot, PodLogsDir: f.podLogs,
		DryRun: c.DryRun, Logger: log} // reclaim adds its component
}

func nodeStatusOptions(c *policy.Config, f *runFlags, log *slog.Logger) kube.NodeStatusOptions {
	effects := map[v1.NodeConditionType]v1.TaintEffect{v1.NodeMemoryPressure: "", v1.NodeDiskPressure: "", v1.NodePIDPressure: ""}
	for cond, e := range c.NodeStatus.Taints {
		effects[cond] = e
	}
	return kube.NodeStatusOptions{NodeName: f.nodeName, Conditions: kube.ConditionsMode(c.NodeStatus.Conditions), TaintEffects: effects,
		ReassertInterval: c.NodeStatus.ReassertInterval, DryRun: c.DryRun, Logger: log.With("component", "nodestatus")}
}

// nodeStatusChanged reports whether a reload changes the node status writer's settings.
func nodeStatusChanged(old, next *policy.Config) bool {
	return old.NodeStatus.Conditions != next.NodeStatus.Conditions || old.NodeStatus.ReassertInterval != next.NodeStatus.ReassertInterval ||
		!maps.Equal(old.NodeStatus.Taints, next.NodeStatus.Taints)
}

func evictorOptions(c *policy.Config, f *runFlags, rc *reclaimerRef, log *slog.Logger) kube.EvictorOptions {
	after := kube.EscalateStop
	if c.Escalation.Delete {
		after = kube.EscalateDelete
	}
	journal := ""
	if c.Reclaim.ImageStateFile != "" {
		journal = filepath.Join(filepath.Dir(c.Reclaim.ImageStateFile), "local-stops.json")
	}
	return kube.EvictorOptions{NodeName: f.nodeName, DryRun: c.DryRun,
		Escalation: kube.EscalationOptions{MaxCandidates: c.Escalation.MaxCandidates, AfterBlocked: after},
		RateLimit: kube.RateLimitOptions{MaxPerPass: c.RateLimits.MaxPerPass,
			PerMinute: c.RateLimits.PerMinute, Burst: c.RateLimits.Burst, CoolDown: c.RateLimits.Cooldown},
		LocalStop: kube.LocalStopOptions{Enabled: c.APIUnreachable.CRIStop, After: c.APIUnreachable.After,
			Stopper: criStopper{rc}, JournalPath: journal},
		// The policy engine waits for the victim (up to loop.podCleanupTimeout,
		// crediting its expected reclaim) without blocking the loop, so
		// reloads, wakes and metrics keep flowing meanwhile.
		WaitForGone:      -1,
		PendingCreditTTL: c.PodCleanupTimeout,
		Logger:           log.With("component", "evictor")}
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

// informerPods lists this node's pods from the informer cache; an unsynced
// cache is an error, never an empty node.
type informerPods struct{ inf *kube.NodeInformers }

func (l informerPods) List() ([]*v1.Pod, error) {
	// Start waited for the first sync, so an empty list is a node without pods.
	return l.inf.Pods.List(labels.Everything())
}

// statusSink forwards conditions to the node status writer while the agent is
// not in dry run (where nothing but Events and metrics is written). Entering
// dry run releases owned entries and taints once. Used from the loop goroutine
// only.
type statusSink struct {
	s       *runningNodeStatus
	enabled bool
	last    []v1.NodeConditionType
}

func (s *statusSink) SetConditions(c []v1.NodeConditionType) {
	s.last = c
	if s.enabled {
		s.s.w.SetConditions(c)
	}
}

func (s *statusSink) update(c *policy.Config) {
	on := !c.DryRun
	if s.enabled && !on {
		s.s.w.SetConditions(nil)
	}
	s.enabled = on
}

// swap replaces the writer, handing it the last conditions at once.
func (s *statusSink) swap(next *runningNodeStatus) {
	s.s.stop()
	s.s = next
	if s.enabled {
		next.w.SetConditions(s.last)
	}
}

// runningNodeStatus is a node status writer and its goroutine. Its dry-run
// mode is fixed, so leaving dry run on reload starts a new one.
type runningNodeStatus struct {
	w      *kube.NodeStatus
	dryRun bool
	cancel context.CancelFunc
	done   chan struct{}
}

func startNodeStatus(ctx context.Context, client kubernetes.Interface, inf *kube.NodeInformers, rec record.EventRecorder, opts kube.NodeStatusOptions) (*runningNodeStatus, error) {
	w, err := kube.NewNodeStatus(client, inf, rec, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runningNodeStatus{w: w, dryRun: opts.DryRun, cancel: cancel, done: make(chan struct{})}
	go func() { w.Run(ctx); close(r.done) }()
	return r, nil
}

func (r *runningNodeStatus) stop() { r.cancel(); <-r.done }

// reclaimerRef is the reclaimer in use and its image tracker. Its dry-run mode
// is fixed at construction, so a reload switching dryRun swaps in a new one;
// the readiness probe reads it from another goroutine.
type reclaimerRef struct {
	p atomic.Pointer[runningReclaimer]
}

type runningReclaimer struct {
	r      *reclaim.Reclaimer
	dryRun bool
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *runningReclaimer) startTracker(ctx context.Context) {
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	go func() { r.r.RunImageTracker(ctx, 0); close(r.done) }()
}

// stopTracker waits for the tracker: it writes the state file, one writer at a time.
func (r *runningReclaimer) stopTracker() { r.cancel(); <-r.done }

func (r *runningReclaimer) stop() {
	r.stopTracker()
	_ = r.r.Close()
}

func startReclaimer(ctx context.Context, opts reclaim.Options) (*reclaimerRef, error) {
	r, err := reclaim.New(opts)
	if err != nil {
		return nil, err
	}
	rr := &runningReclaimer{r: r, dryRun: opts.DryRun}
	rr.startTracker(ctx)
	ref := &reclaimerRef{}
	ref.p.Store(rr)
	return ref, nil
}

func (ref *reclaimerRef) current() *runningReclaimer { return ref.p.Load() }

// swap replaces the reclaimer; on error the current one stays in use.
func (ref *reclaimerRef) swap(ctx context.Context, opts reclaim.Options) error {
	old := ref.current()
	old.stopTracker()
	r, err := reclaim.New(opts)
	if err != nil {
		old.startTracker(ctx)
		return err
	}
	next := &runningReclaimer{r: r, dryRun: opts.DryRun}
	next.startTracker(ctx)
	ref.p.Store(next)
	_ = old.r.Close()
	return nil
}

// kubeEvictor adapts kube.Evictor to the loop's Evictor.
type kubeEvictor struct {
	e *kube.Evictor
	// apiReachable says whether the last API request succeeded.
	apiReachable func() bool
	lastReport   time.Time
}

func (k *kubeEvictor) Evict(ctx context.Context, cands []policy.Candidate) agent.EvictResult {
	k.e.StartPass()
	start := time.Now()
	res := k.e.Evict(ctx, cands)
	return agent.EvictResult{Outcome: string(res.Outcome), Err: res.Err, At: start, Victim: res.Victim}
}

// localStopReportInterval spaces the attempts to report local stops, so a
// flapping API server does not cost the loop a request every pass.
const localStopReportInterval = 10 * time.Second

// ReportPending reports pods stopped through the CRI while the API server was
// unreachable (Events, pod deletion), once it answers again.
func (k *kubeEvictor) ReportPending(ctx context.Context, log *slog.Logger) {
	if k.e.PendingLocalStops() == 0 || !k.apiReachable() || time.Since(k.lastReport) < localStopReportInterval {
		return
	}
	k.lastReport = time.Now()
	n, err := k.e.ReportLocalStops(ctx)
	if err != nil {
		log.Warn("local stops not all reported; retrying", "reported", n, "pending", k.e.PendingLocalStops(), "err", err)
	}
}

// criReclaimer adapts reclaim.Reclaimer to the loop's Reclaimer.
type criReclaimer struct{ ref *reclaimerRef }

func (c criReclaimer) Reclaim(ctx context.Context, step policy.ReclaimStep, sig policy.Signal, need int64, live []*v1.Pod) agent.ReclaimResult {
	res, err := c.ref.current().r.Run(ctx, reclaim.Request{Step: step, Signal: sig, Need: need, LivePods: reclaim.LivePodsFromPods(live)})
	return agent.ReclaimResult{Freed: res.Freed, Items: res.ItemsRemoved + res.WouldRemove, Err: err}
}

// criStopper adapts reclaim's CRI stop to the evictor's LocalPodStopper.
type criStopper struct{ ref *reclaimerRef }

func (c criStopper) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error {
	return c.ref.current().r.StopPodSandboxByPodUID(ctx, uid)
}

// evictorChanged says whether the evictor must be rebuilt for next.
func evictorChanged(prev, next *policy.Config) bool {
	return prev.DryRun != next.DryRun || prev.Escalation != next.Escalation || prev.RateLimits != next.RateLimits ||
		prev.APIUnreachable != next.APIUnreachable || prev.PodCleanupTimeout != next.PodCleanupTimeout ||
		prev.Reclaim.ImageStateFile != next.Reclaim.ImageStateFile
}

// reachability records whether the API server answered recently, from every
// request the agent makes anyway (watches, patches, evictions), so /readyz
// costs the API server a request only when the agent has been quiet and has
// no watch open: on a fleet, a /readyz request per node per probe period adds
// up.
type reachability struct {
	mu       sync.Mutex
	lastOK   time.Time
	lastErr  error
	lastFail time.Time
	// openWatches counts watch streams being read; one that ends in an error
	// counts as a failure (client-go's HTTP/2 health check ends a stream on a
	// dead connection within about 45 s).
	openWatches int
}

func (r *reachability) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || resp.StatusCode >= 500 {
			r.fail(err, req, resp)
			return resp, err
		}
		r.lastOK = time.Now()
		if resp.StatusCode < 300 && req.URL.Query().Get("watch") == "true" {
			r.openWatches++
			resp.Body = &watchBody{ReadCloser: resp.Body, r: r}
		}
		return resp, err
	})
}

// fail records a failed request; r.mu must be held.
func (r *reachability) fail(err error, req *http.Request, resp *http.Response) {
	r.lastFail = time.Now()
	if err != nil {
		r.lastErr = err
	} else {
		r.lastErr = fmt.Errorf("%s %s: HTTP %d", req.Method, req.URL.Path, resp.StatusCode)
	}
}

// watchBody ends its watch's count when the stream ends.
type watchBody struct {
	io.ReadCloser
	r    *reachability
	once sync.Once
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end(err)
	}
	return n, err
}

func (b *watchBody) Close() error {
	b.end(nil)
	return b.ReadCloser.Close()
}

func (b *watchBody) end(err error) {
	b.once.Do(func() {
		b.r.mu.Lock()
		defer b.r.mu.Unlock()
		b.r.openWatches--
		// EOF is the server ending the watch (its timeout); cancellation is ours.
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
			b.r.lastFail, b.r.lastErr = time.Now(), fmt.Errorf("watch stream: %w", err)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// reachable: the last request the agent made got an answer.
func (r *reachability) reachable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.lastOK.IsZero() && r.lastOK.After(r.lastFail)
}

// check is ready while the last request succeeded and either a watch stream
// is open or that request is less than 30 s old; otherwise it asks the API
// server's /readyz itself.
func (r *reachability) check(ctx context.Context, client kubernetes.Interface) error {
	r.mu.Lock()
	ok, fail, lastErr, watches := r.lastOK, r.lastFail, r.lastErr, r.openWatches
	r.mu.Unlock()
	if !ok.IsZero() && ok.After(fail) && (watches > 0 || time.Since(ok) < 30*time.Second) {
		return nil
	}
	if !fail.IsZero() && fail.After(ok) && time.Since(fail) < 5*time.Second {
		return fmt.Errorf("API server unreachable: %v", lastErr)
	}
	if err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		return fmt.Errorf("API server unreachable: %w", err)
	}
	return nil
}
