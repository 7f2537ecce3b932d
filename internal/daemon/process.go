package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/configfile"
	"github.com/evictiond/evictiond/internal/confine"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/metricsserver"
	"github.com/evictiond/evictiond/internal/node"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/trace"
)

// ProcessOptions are `evictiond run`'s command line: where the configuration
// and the API server are, this node's name and paths, how to serve.
type ProcessOptions struct {
	// ConfigPath is the EvictionConfiguration file, reloaded on change.
	ConfigPath string
	// Kubeconfig is the API server's; empty: in-cluster.
	Kubeconfig string
	NodeName   string
	// SelfUID is evictiond's own pod, never evicted.
	SelfUID string
	Serving metricsserver.Flags
	// Node says where the node's files are and how its cgroups are named.
	Node node.Paths
	// DryRun wins over the file's dryRun.
	DryRun bool
	// LegacySignalMetrics also exports the signal metric families of mixed
	// units of earlier releases (metrics.Options.LegacySignalFamilies).
	LegacySignalMetrics bool
	// RecordTrace, when set, is a file the node's answers to the loop and
	// every pass's decisions are written to (internal/trace), for `evictiond
	// simulate --trace`; RecordTraceMaxBytes bounds it.
	RecordTrace         string
	RecordTraceMaxBytes int64
	Logger              *slog.Logger
	// Confinement is what the process did to confine itself before it
	// started (internal/confine), exported as evictiond_confinement; empty:
	// not confined (the daemon embedded in another process).
	Confinement confine.Report
}

// DefaultTraceMaxBytes bounds a trace recording (--record-trace-max-bytes).
const DefaultTraceMaxBytes = trace.DefaultMaxBytes

// RunProcess is the daemon's process on a node: it loads the configuration,
// serves /metrics and the probes from the start, opens the real node
// (internal/node), builds the daemon on it, follows the configuration file,
// and runs the loop until ctx ends.
func RunProcess(ctx context.Context, o ProcessOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	tuneGC()
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
	cfg, data, err := configfile.Load(o.ConfigPath)
	if err != nil {
		// At start there is no last good configuration to fall back on.
		return fmt.Errorf("configuration %s:\n%w", o.ConfigPath, err)
	}
	// The runtime socket is chosen once: reclaim.criEndpoint changes need a restart anyway.
	runtime, err := o.Node.DetectRuntime(cfg.Reclaim.CRIEndpoint)
	if err != nil {
		log.Warn("runtime socket detection", "err", err)
	}
	o.applyOverrides(cfg, runtime.Endpoint)
	for _, w := range cfg.Warnings {
		log.Warn("configuration warning", "warning", w)
	}
	m := metrics.NewWithOptions(metrics.Options{LegacySignalFamilies: o.LegacySignalMetrics})
	for _, c := range confine.Controls {
		in := 0.0
		for _, r := range o.Confinement {
			if r.Control == c && r.Applied {
				in = 1
			}
		}
		m.Confinement.WithLabelValues(string(c)).Set(in)
	}

	restCfg, err := RestConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	reach := &kube.Reachability{}
	restCfg.Wrap(reach.Wrap)
	restCfg.UserAgent = "evictiond"
	SetClientLimits(restCfg)
	client, err := kube.NewClient(restCfg)
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
	startupHandler := Handler(m.Registry, nil, []agent.Check{starting})
	handler.Store(&startupHandler)
	srv, err := metricsserver.Start(ctx, metricsserver.Options{Flags: o.Serving, Client: client, Host: o.NodeName, Log: log,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) })})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	})

	n, err := node.Open(ctx, cfg, node.Options{Paths: o.Node, Metrics: m, Logger: log, Runtime: runtime,
		Starting: func(step string) { startStep.Store(step) }})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, n.Close)
	var dn Node = n
	var onPass func(string, *agent.Report)
	var recorder *Recorder
	if o.RecordTrace != "" {
		w, err := trace.Create(o.RecordTrace, o.RecordTraceMaxBytes)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() {
			if err := w.Close(); err != nil {
				log.Error("trace recording incomplete", "path", o.RecordTrace, "err", err)
			}
		})
		recorder = NewRecorder(ctx, n, w, time.Now)
		recorder.Start(o.NodeName, types.UID(o.SelfUID), data, o.DryRun)
		dn, onPass = recorder, recorder.OnPass
		log.Info("recording a trace of the node's readings and the loop's decisions", "path", o.RecordTrace, "maxBytes", o.RecordTraceMaxBytes)
	}

	startStep.Store("waiting for the pod and node informers to sync with the API server")
	d, err := New(ctx, cfg, Deps{Client: client, Node: dn, Metrics: m, APIReachable: reach.Reachable},
		Options{NodeName: o.NodeName, SelfUID: types.UID(o.SelfUID), NodeStatus: true, Logger: log, OnPass: onPass,
			LoopJournal: agent.LoopJournalPath(cfg)})
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

	watcher := &configfile.Watcher{Path: o.ConfigPath, Log: log.With("component", "config"),
		Accepted: func(data []byte) {
			if recorder != nil {
				recorder.Config(data)
			}
		},
		Apply: func(c *policy.Config) {
			o.applyOverrides(c, runtime.Endpoint)
			m.ConfigReloads.WithLabelValues("success").Inc()
			m.ConfigLastReloadSuccessful.Set(1)
			m.ConfigLastReloadTime.SetToCurrentTime()
			log.Info("configuration reloaded", "path", o.ConfigPath)
			for _, w := range c.Warnings {
				log.Warn("configuration warning", "warning", w)
			}
			d.Reload(c)
		},
		Reject: func(err error) {
			m.ConfigReloads.WithLabelValues("rejected").Inc()
			m.ConfigLastReloadSuccessful.Set(0)
			problems := strings.Split(err.Error(), "\n")
			log.Error("configuration rejected; the previous configuration stays in force", "path", o.ConfigPath, "problems", problems)
			d.Recorder().Eventf(kube.NodeRef(o.NodeName), v1.EventTypeWarning, "ConfigRejected",
				"evictiond rejected %s; the previous configuration stays in force: %s", filepath.Base(o.ConfigPath), strings.Join(problems, "; "))
		}}
	watcher.Seed(data)
	go watcher.Run(ctx)

	interval := cfg.LoopInterval
	live := []agent.Check{d.Agent.Live(2*time.Minute + 2*cfg.PodCleanupTimeout)}
	ready := []agent.Check{
		d.Agent.StatsFresh(10*interval + 2*cfg.PodCleanupTimeout + 10*time.Second),
		CachedCheck("apiserver", 5*time.Second, func(ctx context.Context) error { return reach.Check(ctx, client) }),
		CachedCheck("cri", 10*time.Second, n.Ready),
	}
	running := Handler(m.Registry, live, ready)
	handler.Store(&running)

	log.Info("evictiond running", "config", o.ConfigPath, "thresholds", len(cfg.Thresholds), "dryRun", cfg.DryRun,
		"hostRoot", o.Node.HostRoot, "metrics", srv.MetricsAddr.String(), "health", srv.HealthAddr.String())
	d.Run(ctx) // returns on SIGTERM
	return nil
}

// applyOverrides: --dry-run wins over the file; an unset reclaim.criEndpoint
// is the runtime socket detected at start.
func (o ProcessOptions) applyOverrides(c *policy.Config, detectedRuntime string) {
	if o.DryRun {
		c.DryRun = true
	}
	if c.Reclaim.CRIEndpoint == "" {
		c.Reclaim.CRIEndpoint = detectedRuntime
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
	ClientQPS   = 5
	ClientBurst = 10
)

// SetClientLimits sets the API client's rate limit.
func SetClientLimits(c *rest.Config) {
	c.QPS, c.Burst = ClientQPS, ClientBurst
}

// NewAdmissionClient is the eviction webhook's API client (kube.AdmissionClient),
// for `evictiond webhook`, which must not import kube.
func NewAdmissionClient(c *rest.Config) (*kube.AdmissionClient, error) {
	return kube.NewAdmissionClient(c)
}

// NewClient is the API client of the groups the agent calls (kube.Client), for
// the subcommands that ask the API server too (observe).
func NewClient(c *rest.Config) (*kube.Client, error) { return kube.NewClient(c) }

// RestConfig is the API server's client configuration: in-cluster when
// kubeconfig is empty.
func RestConfig(kubeconfig string) (*rest.Config, error) {
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
