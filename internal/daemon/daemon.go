// Package daemon is evictiond's wiring: it owns the Node interface (node.go:
// everything the loop needs from a node) and builds the decision loop
// (agent.Agent) with the Kubernetes side (kube.Evictor, node informers, the
// node status writer, Events) around a Node and clients, reconfiguring them
// on every reload. `evictiond run` is RunProcess (process.go): the real API
// client and the real node (internal/node); `evictiond simulate` and the
// tests build it with a fake API (internal/kube/kubefake) and a scenario's node on a
// virtual clock, so every decision a simulation shows is the daemon's own.
// See docs/architecture.md.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/policy"
)

// Deps are the parts that differ between a node and a simulation.
type Deps struct {
	// Client is the API server: evictions, Events, node status, and the pod and
	// node informers unless Pods is set.
	Client kube.Interface
	// Pods lists the node's pods; nil: node-scoped informers on Client, started
	// (and synced) by New.
	Pods agent.Pods
	// Node is the node the loop decides on: internal/node's, or a simulated one.
	Node Node
	// Recorder records Events; nil: one writing to Client.
	Recorder kube.EventRecorder
	// Metrics receives the loop's metrics; nil: a fresh registry.
	Metrics *metrics.Metrics
	// APIReachable says whether the API server answered recently
	// (kube.Reachability.Reachable); nil: always.
	APIReachable func() bool
	// Clock drives the loop's decisions and the evictor; nil: the real clock.
	Clock clock.Clock
	// Owners names a looping workload in its EvictionLoop Event; nil:
	// kube.WorkloadRefs on Client (a read of the API server).
	Owners agent.Owners
}

// Options name the node and say which parts run.
type Options struct {
	NodeName string
	// SelfUID is evictiond's own pod, never evicted.
	SelfUID types.UID
	// NodeStatus runs the node status writer (conditions, taints); it needs
	// the node informer, so Deps.Pods must be nil.
	NodeStatus bool
	// LoopJournal keeps the eviction loop records across restarts
	// (agent.LoopJournalPath); "": in memory only.
	LoopJournal string
	Logger      *slog.Logger
	// OnPass sees every pass's report in the loop goroutine (a Recorder's).
	OnPass func(source string, rep *agent.Report)
}

// Daemon is one node's agent with its parts.
type Daemon struct {
	Agent     *agent.Agent
	Evictor   *kube.Evictor
	Informers *kube.NodeInformers // nil when Deps.Pods was given
	Status    *kube.NodeStatus    // nil unless Options.NodeStatus

	deps     Deps
	opts     Options
	ctx      context.Context // the parts' lifetime: New's, ended by Close
	cancel   context.CancelFunc
	cfg      *policy.Config // the configuration in force
	started  *policy.Config
	cleanups []func()
}

// New builds the daemon for cfg. Its goroutines (informers, Events, node
// status) run until ctx ends or Close; Close waits for them. Starting the informers
// waits for their first sync with the API server.
func New(ctx context.Context, cfg *policy.Config, deps Deps, opts Options) (d *Daemon, err error) {
	if opts.NodeName == "" {
		return nil, errors.New("daemon: NodeName: value \"\": must not be empty")
	}
	if deps.Client == nil || deps.Node == nil {
		return nil, errors.New("daemon: Deps.Client and Deps.Node are required")
	}
	if opts.NodeStatus && deps.Pods != nil {
		return nil, errors.New("daemon: Options.NodeStatus: value true: needs the node informer (Deps.Pods must be nil)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.APIReachable == nil {
		deps.APIReachable = func() bool { return true }
	}
	if deps.Metrics == nil {
		deps.Metrics = metrics.New()
	}
	if deps.Owners == nil {
		deps.Owners = kube.WorkloadRefs{Client: deps.Client}
	}
	ctx, cancel := context.WithCancel(ctx)
	d = &Daemon{ctx: ctx, cancel: cancel, deps: deps, opts: opts, cfg: cfg, started: cfg}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if deps.Recorder == nil {
		for _, reason := range kube.EventDropReasons { // a series at 0 from the start, for rate() and alerts
			deps.Metrics.EventsDropped.WithLabelValues(reason)
		}
		rec, stop := kube.NewEventRecorder(ctx, deps.Client, kube.EventRecorderOptions{NodeName: opts.NodeName,
			Logger: opts.Logger.With("component", "events"), OnDrop: func(reason string) { deps.Metrics.EventsDropped.WithLabelValues(reason).Inc() }})
		d.deps.Recorder = rec
		d.cleanups = append(d.cleanups, stop)
	}
	if deps.Pods == nil {
		inf, err := kube.NewNodeInformers(deps.Client, opts.NodeName)
		if err != nil {
			return d, err
		}
		inf.Logger = opts.Logger.With("component", "cache")
		d.Informers = inf
		d.deps.Pods = inf
		if opts.NodeStatus {
			if err := d.startNodeStatus(ctx); err != nil {
				return d, err
			}
		}
		if err := inf.Start(ctx); err != nil {
			return d, fmt.Errorf("node informers: %w", err)
		}
		d.cleanups = append(d.cleanups, inf.Shutdown)
	}
	d.Evictor, err = kube.NewEvictor(deps.Client, d.deps.Recorder, d.evictorOptions(cfg))
	if err != nil {
		return d, err
	}
	ad := agent.Deps{Stats: deps.Node, Pods: d.deps.Pods, Evictor: d.Evictor, Reclaimer: deps.Node, Freezer: deps.Node, MemoryReclaimer: deps.Node,
		Recorder: d.deps.Recorder, Metrics: deps.Metrics, Owners: deps.Owners}
	if d.Status != nil {
		ad.Status = d.Status
	}
	d.Agent = agent.New(cfg, ad, agent.Options{NodeName: opts.NodeName, SelfUID: opts.SelfUID, Wake: deps.Node.Wake(),
		Clock: deps.Clock, Sleep: deps.Clock.Sleep, Logger: opts.Logger.With("component", "loop"), OnConfig: d.reconfigure,
		LoopJournal: opts.LoopJournal, OnPass: opts.OnPass})
	deps.Node.OnBrakeExpired(d.Agent.BrakeExpired)
	if d.Status != nil {
		// A restart (a crash, an upgrade) does not release the pressure the node
		// shows at once: the transition period runs again from now.
		d.Agent.HoldConditions(d.Status.ShownPressure())
	}
	return d, nil
}

// startNodeStatus builds the node status writer on the informers (before they
// start: it registers a node handler) and runs it until ctx ends.
func (d *Daemon) startNodeStatus(ctx context.Context) error {
	opts := kube.NodeStatusOptionsFromConfig(d.cfg)
	opts.NodeName, opts.Logger = d.opts.NodeName, d.opts.Logger.With("component", "nodestatus")
	s, err := kube.NewNodeStatus(d.deps.Client, d.Informers, d.deps.Recorder, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	d.cleanups = append(d.cleanups, func() { cancel(); <-done })
	d.Status = s
	return nil
}

func (d *Daemon) evictorOptions(c *policy.Config) kube.EvictorOptions {
	o := kube.EvictorOptionsFromConfig(c)
	o.NodeName, o.APIReachable, o.Clock = d.opts.NodeName, d.deps.APIReachable, d.deps.Clock
	o.Logger = d.opts.Logger.With("component", "evictor")
	o.LocalStop.Stopper = d.deps.Node
	return o
}

// reconfigure runs in the loop goroutine when a new configuration is applied:
// every part takes its section; what only a restart applies is logged.
func (d *Daemon) reconfigure(c *policy.Config) {
	log := d.opts.Logger
	if err := d.Evictor.Reconfigure(d.evictorOptions(c)); err != nil {
		log.Error("evictor keeps its previous settings", "err", err)
	}
	d.deps.Node.Reconfigure(c)
	if d.Status != nil {
		opts := kube.NodeStatusOptionsFromConfig(c)
		opts.NodeName, opts.Logger = d.opts.NodeName, log.With("component", "nodestatus")
		if err := d.Status.Reconfigure(d.ctx, opts); err != nil {
			log.Error("node status writer keeps its previous settings", "err", err)
		}
	}
	if restartOnly := RestartOnlyChanges(d.started, c); restartOnly != "" {
		log.Warn("configuration changes that take effect on restart", "fields", restartOnly)
	}
	d.cfg = c
}

// Run runs the loop until ctx ends.
func (d *Daemon) Run(ctx context.Context) { d.Agent.Run(ctx) }

// Reload hands a new configuration to the loop.
func (d *Daemon) Reload(c *policy.Config) { d.Agent.Reload(c) }

// Close stops what New started (its goroutines end with their context) and
// waits for them, last first.
func (d *Daemon) Close() {
	d.cancel()
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
	d.cleanups = nil
}

// RestartOnlyChanges names settings a reload cannot apply to running parts.
func RestartOnlyChanges(old, next *policy.Config) string {
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
	if old.NodeStatus.ReassertInterval != next.NodeStatus.ReassertInterval {
		out = append(out, "nodeStatus.reassertInterval")
	}
	return strings.Join(out, ", ")
}

// Recorder is the daemon's Event recorder.
func (d *Daemon) Recorder() kube.EventRecorder { return d.deps.Recorder }

// The Kubernetes side implements the loop's interfaces directly.
var (
	_ agent.Evictor = (*kube.Evictor)(nil)
	_ agent.Pods    = (*kube.NodeInformers)(nil)
)
