package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	reach := &reachability{}
	restCfg.Wrap(reach.wrap)
	restCfg.UserAgent = "evictiond"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}

	informers, err := kube.NewNodeInformers(client, f.nodeName, 0)
	if err != nil {
		return err
	}
	if err := informers.Start(ctx); err != nil {
		return fmt.Errorf("node informers: %w", err)
	}
	defer informers.Shutdown()
	recorder, stopRecorder := kube.NewEventRecorder(ctx, client, f.nodeName)
	defer stopRecorder()

	rc, err := reclaim.New(reclaimOptions(cfg, f, log))
	if err != nil {
		return err
	}
	defer rc.Close()
	go rc.RunImageTracker(ctx, 0)

	monCfg := monitor.Config{HostRoot: f.hostRoot, KubeletRootDir: f.kubeletRoot, PodLogsDir: f.podLogs, ImageFsDir: f.imageFsDir,
		CgroupDriver: monitor.CgroupDriver(f.cgroupDriver), CgroupRoot: f.cgroupRoot,
		MemoryFormula: monitor.MemoryFormula(cfg.MemoryFormula), HousekeepingInterval: cfg.HousekeepingInterval,
		SignalReadErrors: m.ObservationErr, Logger: log.With("component", "monitor")}
	rt, closeRT, err := monitor.DialCRI(cfg.Reclaim.CRIEndpoint)
	if err != nil {
		log.Warn("CRI unavailable for stats; imagefs read through cAdvisor, writable layers missing", "endpoint", cfg.Reclaim.CRIEndpoint, "err", err)
	} else {
		defer closeRT()
		monCfg.Runtime = rt
	}
	mon, err := monitor.New(monCfg)
	if err != nil {
		return err
	}
	if err := mon.Start(ctx); err != nil {
		return fmt.Errorf("starting the monitor: %w", err)
	}
	defer mon.Stop()
	m.Registry.MustRegister(mon.Collectors()...)

	status, err := kube.NewNodeStatus(client, informers, recorder, nodeStatusOptions(cfg, f, log))
	if err != nil {
		return err
	}
	statusCtx, stopStatus := context.WithCancel(ctx)
	defer stopStatus()
	statusDone := make(chan struct{})
	go func() { status.Run(statusCtx); close(statusDone) }()

	evictor, err := kube.NewEvictor(client, informers.Pods, recorder, evictorOptions(cfg, f, rc, log))
	if err != nil {
		return err
	}
	ev := &kubeEvictor{e: evictor}

	waker := notify.NewWaker()
	notifyMetrics := notify.NewMetrics()
	m.Registry.MustRegister(notifyMetrics.Collectors()...)
	readMemory := func() (policy.Observations, error) { return mon.ObserveMemory().Observations, nil }
	nm, err := notify.New(notifyOptions(cfg, f, readMemory, notifyMetrics, log), waker)
	if err != nil {
		return err
	}
	go func() {
		if err := nm.Run(ctx); err != nil {
			log.Error("fast path stopped; the loop's ticker remains", "err", err)
		}
	}()

	sink := newStatusSink(status, cfg)
	deps := agent.Deps{Stats: monitorStats{m: mon}, Pods: informerPods{informers}, Status: sink,
		Evictor: ev, Reclaimer: criReclaimer{rc}, Recorder: recorder, Metrics: m}
	var a *agent.Agent
	a = agent.New(cfg, deps, agent.Options{NodeName: f.nodeName, SelfUID: types.UID(f.selfUID), Wake: waker.C(), Logger: log.With("component", "loop"),
		OnConfig: func(c *policy.Config) {
			// Runs in the loop goroutine: rebuild what depends on the configuration.
			if e, err := kube.NewEvictor(client, informers.Pods, recorder, evictorOptions(c, f, rc, log)); err != nil {
				log.Error("evictor not rebuilt; keeping the previous one", "err", err)
			} else {
				ev.e = e
			}
			if err := nm.Reconfigure(notifyOptions(c, f, readMemory, notifyMetrics, log)); err != nil {
				log.Error("fast path not reconfigured", "err", err)
			}
			sink.update(c)
			if restartOnly := restartOnlyChanges(cfg, c); restartOnly != "" {
				log.Warn("configuration changes that take effect on restart", "fields", restartOnly)
			}
		}})
	m.ConfigLastReloadSuccessful.Set(1)
	m.ConfigLastReloadTime.SetToCurrentTime()

	watcher := &configfile.Watcher{Path: f.config, Log: log.With("component", "config"),
		Apply: func(c *policy.Config) {
			applyFlagOverrides(c, f)
			m.ConfigReloads.WithLabelValues("success").Inc()
			m.ConfigLastReloadSuccessful.Set(1)
			m.ConfigLastReloadTime.SetToCurrentTime()
			log.Info("configuration reloaded", "path", f.config)
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
		agent.CachedCheck("cri", 10*time.Second, rc.Ready),
	}
	srv := &http.Server{Addr: f.metricsAddr, Handler: agent.Handler(m.Registry, live, ready), ReadHeaderTimeout: 5 * time.Second}
	lis, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-address %s: %w", f.metricsAddr, err)
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()

	log.Info("evictiond running", "config", f.config, "thresholds", len(cfg.Thresholds), "dryRun", cfg.DryRun,
		"hostRoot", f.hostRoot, "metrics", lis.Addr().String())
	a.Run(ctx) // returns on SIGTERM

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	stopStatus()
	<-statusDone
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
		DryRun: c.DryRun, Logger: log.With("component", "reclaim")}
}

func nodeStatusOptions(c *policy.Config, f *runFlags, log *slog.Logger) kube.NodeStatusOptions {
	effects := map[v1.NodeConditionType]v1.TaintEffect{v1.NodeMemoryPressure: "", v1.NodeDiskPressure: "", v1.NodePIDPressure: ""}
	for cond, e := range c.NodeStatus.Taints {
		effects[cond] = e
	}
	return kube.NodeStatusOptions{NodeName: f.nodeName, TaintEffects: effects, ReassertInterval: c.NodeStatus.ReassertInterval,
		DryRun: c.DryRun, Logger: log.With("component", "nodestatus")}
}

func evictorOptions(c *policy.Config, f *runFlags, rc *reclaim.Reclaimer, log *slog.Logger) kube.EvictorOptions {
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
		WaitForGone: c.PodCleanupTimeout,
		Logger:      log.With("component", "evictor")}
}

func notifyOptions(c *policy.Config, f *runFlags, read notify.MemoryReader, nm *notify.Metrics, log *slog.Logger) notify.Options {
	opts := notify.OptionsFromConfig(c)
	opts.CgroupRoot = filepath.Join(f.hostRoot, "/sys/fs/cgroup")
	opts.ProcRoot = filepath.Join(f.hostRoot, "/proc")
	opts.KubepodsCgroup = "kubepods"
	if f.cgroupDriver == "systemd" {
		opts.KubepodsCgroup = "kubepods.slice"
	}
	opts.ReadMemory, opts.Logger, opts.Metrics = read, log.With("component", "notify"), nm
	return opts
}

// informerPods lists this node's pods from the informer cache; an unsynced
// cache is an error, never an empty node.
type informerPods struct{ inf *kube.NodeInformers }

func (l informerPods) List() ([]*v1.Pod, error) {
	// Start waited for the first sync, so an empty list is a node without pods.
	return l.inf.Pods.List(labels.Everything())
}

// statusSink forwards conditions to the node status writer while
// nodeStatus.conditions is on and the agent is not in dry run (where nothing
// but Events and metrics is written). Turning it off releases owned entries once.
type statusSink struct {
	s       *kube.NodeStatus
	enabled atomic.Bool
}

func newStatusSink(s *kube.NodeStatus, c *policy.Config) *statusSink {
	sink := &statusSink{s: s}
	sink.update(c)
	return sink
}

func (s *statusSink) SetConditions(c []v1.NodeConditionType) {
	if s.enabled.Load() {
		s.s.SetConditions(c)
	}
}

func (s *statusSink) update(c *policy.Config) {
	on := c.NodeStatus.Conditions && !c.DryRun
	if was := s.enabled.Swap(on); was && !on {
		s.s.SetConditions(nil)
	}
}

// kubeEvictor adapts kube.Evictor to the loop's Evictor.
type kubeEvictor struct{ e *kube.Evictor }

func (k *kubeEvictor) Evict(ctx context.Context, cands []policy.Candidate) agent.EvictResult {
	k.e.StartPass()
	start := time.Now()
	res := k.e.Evict(ctx, cands)
	return agent.EvictResult{Outcome: string(res.Outcome), Err: res.Err, At: start, Victim: res.Victim}
}

// criReclaimer adapts reclaim.Reclaimer to the loop's Reclaimer.
type criReclaimer struct{ r *reclaim.Reclaimer }

func (c criReclaimer) Reclaim(ctx context.Context, step policy.ReclaimStep, sig policy.Signal, need int64, live []*v1.Pod) agent.ReclaimResult {
	res, err := c.r.Run(ctx, reclaim.Request{Step: step, Signal: sig, Need: need, LivePods: reclaim.LivePodsFromPods(live)})
	return agent.ReclaimResult{Freed: res.Freed, Items: res.ItemsRemoved + res.WouldRemove, Err: err}
}

// criStopper adapts reclaim's CRI stop to the evictor's LocalPodStopper.
type criStopper struct{ r *reclaim.Reclaimer }

func (c criStopper) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error {
	_, err := c.r.StopPod(ctx, uid, 0)
	return err
}

// reachability records whether the API server answered recently, from every
// request the agent makes anyway (watches, patches, evictions), so /readyz
// costs the API server a request only when the agent has been quiet.
type reachability struct {
	mu       sync.Mutex
	lastOK   time.Time
	lastErr  error
	lastFail time.Time
}

func (r *reachability) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || resp.StatusCode >= 500 {
			r.lastFail = time.Now()
			if err != nil {
				r.lastErr = err
			} else {
				r.lastErr = fmt.Errorf("%s %s: HTTP %d", req.Method, req.URL.Path, resp.StatusCode)
			}
		} else {
			r.lastOK = time.Now()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// check is ready when the last request succeeded; after 30 s without any
// request it asks the API server's /readyz itself.
func (r *reachability) check(ctx context.Context, client kubernetes.Interface) error {
	r.mu.Lock()
	ok, fail, lastErr := r.lastOK, r.lastFail, r.lastErr
	r.mu.Unlock()
	if !ok.IsZero() && ok.After(fail) && time.Since(ok) < 30*time.Second {
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
