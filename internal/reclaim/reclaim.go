// Package reclaim frees node disk through the container runtime (CRI), as the kubelet's
// node-level reclaim does before it evicts pods:
//
//   - container GC (policy.ReclaimContainerGC): dead containers and sandboxes of pods no longer on
//     the node, and older dead instances of live pods' containers; never the last dead instance
//     of a live pod's container (the kubelet needs it for restart counts and `logs --previous`);
//   - image GC (policy.ReclaimImageGC): unused images, least recently used first, pinned and young
//     images kept, until the requested amount is freed (not everything); first-seen and last-used
//     times are tracked by evictiond itself in a state file, since the CRI has no last-used time;
//   - pod log cleanup (policy.ReclaimPodLogs): /var/log/pods directories of pods no longer on the
//     node, and dangling /var/log/containers links.
//
// StopPod stops a pod through the CRI, for the eviction ladder's local stop when the API server
// is unreachable; Ready answers /readyz; Images explains image GC's choices.
//
// Every step measures what it freed with statfs on the filesystem the signal concerns, before
// and after. A Reclaimer never decides on its own that a pod is gone: the set of live pod UIDs is
// an input, and when it is unknown nothing that depends on it is removed.
//
// Run, TrackImages, Images and StopPod serialize on the Reclaimer, so the image tracker may run
// in its own goroutine beside the decision loop.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

// Defaults of Options, applied by New to zero fields.
const (
	// DefaultRuntimeEndpoint is containerd's CRI socket. CRI-O's is unix:///var/run/crio/crio.sock.
	DefaultRuntimeEndpoint = policy.DefaultCRIEndpoint
	// DefaultCallTimeout bounds every CRI call (and the connection attempt). The kubelet's
	// runtimeRequestTimeout is 2m; image removal on a loaded disk is the slowest call here.
	DefaultCallTimeout = 2 * time.Minute
	// DefaultStateFile is where first-seen and last-used times of images are kept across restarts.
	DefaultStateFile = policy.DefaultImageStateFile
	// DefaultContainerLogsDir holds the kubelet's per-container symlinks into
	// nodefs.DefaultPodLogsDir.
	DefaultContainerLogsDir = "/var/log/containers"
	// DefaultPodLogsMinAge protects a pod log directory created moments ago, whose pod may not
	// be in the live-pod set yet (the set comes from an informer and can lag the kubelet).
	DefaultPodLogsMinAge = time.Minute
)

// Options configure a Reclaimer. Zero fields take the defaults above.
type Options struct {
	// RuntimeEndpoint is the CRI runtime service endpoint, e.g. unix:///run/containerd/containerd.sock
	// (containerd) or unix:///var/run/crio/crio.sock (CRI-O). Default DefaultRuntimeEndpoint.
	RuntimeEndpoint string
	// ImageEndpoint is the CRI image service endpoint. Default: RuntimeEndpoint.
	ImageEndpoint string
	// CallTimeout bounds each CRI call. Default DefaultCallTimeout.
	CallTimeout time.Duration

	// ImageMinimumAge: images first seen by evictiond less than this long ago are kept; 0
	// means no minimum. The daemon passes reclaim.imageGC.minAge (policy.Compile's
	// default is the kubelet's 2 min).
	ImageMinimumAge time.Duration
	// StateFile keeps image first-seen/last-used times; a path as the agent sees it (the
	// DaemonSet mounts a host directory there). Default DefaultStateFile.
	StateFile string
	// PinnedImages are never removed, in addition to images the runtime reports as pinned and
	// the runtime's sandbox (pause) image. An entry matches an image by ID ("sha256:..."), by a
	// full reference ("registry.k8s.io/pause:3.10", "repo@sha256:..."), or, when it has neither
	// tag nor digest, by repository ("registry.k8s.io/pause" pins every tag).
	PinnedImages []string

	// HostRoot prefixes every host path below (and log paths reported by the runtime) when the
	// agent sees the host's filesystem under a mount, e.g. "/host". Default "" (host paths as is).
	HostRoot string
	// NodeFsPath is a path on nodefs (the kubelet's root dir). Default nodefs.DefaultKubeletRootDir.
	NodeFsPath string
	// PodLogsDir is the kubelet's pod log directory. Default nodefs.DefaultPodLogsDir.
	PodLogsDir string
	// ContainerLogsDir is the kubelet's container log symlink directory. Default DefaultContainerLogsDir.
	ContainerLogsDir string
	// PodLogsMinAge: a pod log directory modified less than this long ago is kept. Default
	// DefaultPodLogsMinAge; a negative value means no minimum.
	PodLogsMinAge time.Duration

	// DryRun logs "would remove" for every item and removes nothing; SetDryRun switches it.
	DryRun bool

	// Clock is the time source. Default: the real clock.
	Clock clock.PassiveClock
	// Logger receives one structured message per decision. Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) applyDefaults() {
	if o.RuntimeEndpoint == "" {
		o.RuntimeEndpoint = DefaultRuntimeEndpoint
	}
	if o.ImageEndpoint == "" {
		o.ImageEndpoint = o.RuntimeEndpoint
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.StateFile == "" {
		o.StateFile = DefaultStateFile
	}
	if o.NodeFsPath == "" {
		o.NodeFsPath = nodefs.DefaultKubeletRootDir
	}
	if o.PodLogsDir == "" {
		o.PodLogsDir = nodefs.DefaultPodLogsDir
	}
	if o.ContainerLogsDir == "" {
		o.ContainerLogsDir = DefaultContainerLogsDir
	}
	if o.PodLogsMinAge == 0 {
		o.PodLogsMinAge = DefaultPodLogsMinAge
	}
	if o.PodLogsMinAge < 0 {
		o.PodLogsMinAge = 0
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *Options) validate() error {
	if o.ImageMinimumAge < 0 {
		return fmt.Errorf("reclaim options: ImageMinimumAge %s: must not be negative (0 means no minimum)", o.ImageMinimumAge)
	}
	if o.CallTimeout < 0 {
		return fmt.Errorf("reclaim options: CallTimeout %s: must not be negative", o.CallTimeout)
	}
	for i, p := range o.PinnedImages {
		if p == "" {
			return fmt.Errorf("reclaim options: PinnedImages[%d] %q: must not be empty", i, p)
		}
	}
	return nil
}

// LivePods is the set of UIDs of the pods bound to this node according to the API server, in
// any phase, plus the runtime UIDs of static pods (LivePodsFromPods builds it). A nil LivePods
// means "unknown" (API unreachable, informer not synced): then no pod is taken for gone. An
// empty, non-nil set means the node has no pods.
type LivePods = sets.Set[types.UID]

// Request asks for one reclaim step.
type Request struct {
	// Step is the action to run.
	Step policy.ReclaimStep
	// Signal names the starved signal; it decides which filesystem is measured (nodefs,
	// imagefs or containerfs) and in which unit (bytes, or inodes for *.inodesFree). Empty:
	// the step's own filesystem in bytes (containerfs for container GC, imagefs for image GC,
	// nodefs for pod logs).
	Signal policy.Signal
	// Need is how much must be freed (signal unit) to reach threshold + minimum reclaim. Image
	// GC stops once the measured gain reaches it; 0 or less means "only what is free to take"
	// for container GC and pod logs, and nothing for image GC.
	Need int64
	// LivePods is the node's live pod set; nil means unknown (see LivePods).
	LivePods LivePods
}

// Result reports one step.
type Result struct {
	Step   policy.ReclaimStep
	Signal policy.Signal
	// Filesystem is the host path that was measured, and Unit "bytes" or "inodes".
	Filesystem string
	Unit       string
	// Freed is the gain in available space (or free inodes) on Filesystem measured by statfs
	// after the step minus before it. Other writers on the same filesystem make it noisy; it
	// can be negative.
	Freed int64
	// ItemsRemoved counts removed containers, sandboxes, images or log directories.
	ItemsRemoved int
	// WouldRemove counts what a dry run would have removed.
	WouldRemove int
	// Errors are per-item failures the step went past.
	Errors []error
	// Duration is the wall time of the step.
	Duration time.Duration
}

// ErrLivePodsUnknown is reported in Result.Errors when a step skipped the pods-gone decisions
// because the live-pod set was nil.
var ErrLivePodsUnknown = errors.New("live pod set unknown: pods not on the live set were not taken for gone")

// Reclaimer runs reclaim steps against one container runtime.
type Reclaimer struct {
	opts   Options
	log    *slog.Logger
	dryRun atomic.Bool

	runMu sync.Mutex // one step or tracking pass at a time: they share the image state

	mu      sync.Mutex // guards the checked services, set on first use
	runtime runtimeService
	images  imageService
	// clients are the connections by endpoint (one when the runtime and image endpoints are
	// the same), made on first use and kept: the monitor reads through them too (RuntimeStats).
	clientsMu sync.Mutex
	clients   map[string]*criClient
	closed    bool
	// lastConnectErr and lastConnectAt hold back reconnection attempts for connectRetryInterval:
	// a failed attempt costs a Version call's timeout when the runtime hangs, and the loop would
	// otherwise try every pass while the runtime is down.
	lastConnectErr error
	lastConnectAt  time.Time

	state *imageState

	// beforeImageRemoval, when set (tests only), runs between the decision to remove an image
	// and the last in-use check before its removal.
	beforeImageRemoval func(ctx context.Context, imageID string)
}

// New returns a Reclaimer. It does not contact the runtime: the connection is made on first
// use and retried on every call until it succeeds, so a runtime that is down at start-up does
// not stop the agent. It loads the image state file (a missing file is an empty state).
func New(opts Options) (*Reclaimer, error) {
	opts.applyDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	r := &Reclaimer{opts: opts, log: opts.Logger.With("component", "reclaim")}
	r.dryRun.Store(opts.DryRun)
	st, err := loadImageState(opts.StateFile, r.log)
	if err != nil {
		return nil, err
	}
	r.state = st
	return r, nil
}

// Close closes the runtime connections.
func (r *Reclaimer) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clientsMu.Lock()
	defer r.clientsMu.Unlock()
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	r.clients, r.runtime, r.images, r.closed = nil, nil, nil, true
	return errors.Join(errs...)
}

// connect returns the runtime and image services, connecting first when needed.
func (r *Reclaimer) connect() (runtimeService, imageService, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runtime != nil && r.images != nil {
		return r.runtime, r.images, nil
	}
	if r.lastConnectErr != nil && time.Since(r.lastConnectAt) < connectRetryInterval {
		return nil, nil, fmt.Errorf("%w (next attempt within %s)", r.lastConnectErr, connectRetryInterval)
	}
	r.lastConnectAt = time.Now()
	rs, is, err := r.dial()
	r.lastConnectErr = err
	return rs, is, err
}

// connectRetryInterval is the least time between two connection attempts to the runtime.
const connectRetryInterval = 5 * time.Second

func (r *Reclaimer) dial() (runtimeService, imageService, error) {
	for _, ep := range []string{r.opts.RuntimeEndpoint, r.opts.ImageEndpoint} {
		// A missing socket fails at once.
		if sock, ok := strings.CutPrefix(ep, "unix://"); ok {
			if _, err := os.Stat(sock); err != nil {
				return nil, nil, fmt.Errorf("connecting to CRI endpoint %s: %w", ep, err)
			}
		}
	}
	shared := r.opts.ImageEndpoint == r.opts.RuntimeEndpoint
	rc, err := r.client(r.opts.RuntimeEndpoint)
	if err == nil {
		err = rc.validate(r.opts.RuntimeEndpoint, true, shared)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to CRI runtime service %s: %w", r.opts.RuntimeEndpoint, err)
	}
	ic := rc
	if !shared {
		if ic, err = r.client(r.opts.ImageEndpoint); err == nil {
			err = ic.validate(r.opts.ImageEndpoint, false, true)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("connecting to CRI image service %s: %w", r.opts.ImageEndpoint, err)
		}
	}
	r.runtime, r.images = rc, ic
	return r.runtime, r.images, nil
}

// client is the connection to endpoint, made on first use (gRPC connects lazily: this does not
// wait for the runtime).
func (r *Reclaimer) client(endpoint string) (*criClient, error) {
	r.clientsMu.Lock()
	defer r.clientsMu.Unlock()
	if c := r.clients[endpoint]; c != nil {
		return c, nil
	}
	if r.closed {
		return nil, errors.New("CRI connection closed")
	}
	c, err := newCRIClient(endpoint, r.opts.CallTimeout)
	if err != nil {
		return nil, err
	}
	if r.clients == nil {
		r.clients = map[string]*criClient{}
	}
	r.clients[endpoint] = c
	return c, nil
}

// Run runs one reclaim step and measures what it freed. The error is for a step that could
// not run at all (runtime unreachable, filesystem not measurable, unknown step); failures of
// single items are in Result.Errors and do not stop the step. Nothing in use is ever removed.
func (r *Reclaimer) Run(ctx context.Context, req Request) (res Result, err error) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	start := r.opts.Clock.Now()
	res = Result{Step: req.Step, Signal: req.Signal}
	defer func() { res.Duration = r.opts.Clock.Since(start) }()

	switch req.Step {
	case policy.ReclaimContainerGC, policy.ReclaimImageGC, policy.ReclaimPodLogs:
	default:
		return res, fmt.Errorf("reclaim step %q: unknown (want %s, %s or %s)", req.Step,
			policy.ReclaimContainerGC, policy.ReclaimImageGC, policy.ReclaimPodLogs)
	}
	rt, is, err := r.connect()
	if err != nil {
		return res, fmt.Errorf("reclaim %s: %w", req.Step, err)
	}
	fs, err := r.filesystemFor(ctx, is, req)
	if err != nil {
		return res, fmt.Errorf("reclaim %s: %w", req.Step, err)
	}
	res.Filesystem, res.Unit = fs.path, fs.unit()
	before, err := fs.available()
	if err != nil {
		return res, fmt.Errorf("reclaim %s: %w", req.Step, err)
	}

	var stepErr error
	switch req.Step {
	case policy.ReclaimContainerGC:
		stepErr = r.collectContainers(ctx, rt, req, &res)
	case policy.ReclaimImageGC:
		stepErr = r.collectImages(ctx, rt, is, req, fs, before, &res)
	case policy.ReclaimPodLogs:
		stepErr = r.cleanPodLogs(ctx, rt, req, &res)
	}

	after, err := fs.available()
	if err != nil {
		return res, errors.Join(stepErr, fmt.Errorf("reclaim %s: %w", req.Step, err))
	}
	res.Freed = after - before
	r.log.Info("reclaim step done", "step", req.Step, "signal", req.Signal, "filesystem", res.Filesystem,
		"unit", res.Unit, "need", req.Need, "freed", res.Freed, "removed", res.ItemsRemoved,
		"wouldRemove", res.WouldRemove, "errors", len(res.Errors), "dryRun", r.dryRun.Load())
	if stepErr != nil {
		return res, fmt.Errorf("reclaim %s: %w", req.Step, stepErr)
	}
	return res, nil
}

// Ready reports whether the runtime answers and says it is ready to run containers: for the
// agent's /readyz.
func (r *Reclaimer) Ready(ctx context.Context) error {
	rt, _, err := r.connect()
	if err != nil {
		return err
	}
	st, err := rt.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("CRI Status: %w", err)
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if cond.Type == runtimeapi.RuntimeReady && !cond.Status {
			return fmt.Errorf("CRI runtime not ready: %s: %s", cond.Reason, cond.Message)
		}
	}
	return nil
}

// EventMessage is a one-line summary for the Node Event, e.g.
// "imageGC freed 41.5Mi on /var/lib/containerd/... (2 removed)".
func (res Result) EventMessage() string {
	amount := fmt.Sprintf("%d inodes", res.Freed)
	if res.Unit != "inodes" {
		amount = resource.NewQuantity(res.Freed, resource.BinarySI).String() + "B"
	}
	msg := fmt.Sprintf("%s freed %s on %s (%d removed", res.Step, amount, res.Filesystem, res.ItemsRemoved)
	if res.WouldRemove > 0 {
		msg += fmt.Sprintf(", %d would be removed: dry run", res.WouldRemove)
	}
	if len(res.Errors) > 0 {
		msg += fmt.Sprintf(", %d errors", len(res.Errors))
	}
	return msg + ")"
}
