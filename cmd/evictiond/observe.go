package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/node"
	"github.com/evictiond/evictiond/internal/policy"
)

const observeUsage = `Usage: evictiond observe [flags]

Shows what evictiond sees on this node: every eviction signal with its
available value, capacity, age and source; the filesystem layout; and each
pod's usage (memory working set, processes, writable layers, logs, local
volumes). Without --kubeconfig/--node-name, pods are found in the kubepods
cgroup tree and are named by UID only.
`

// runObserve is `evictiond observe`. It returns the process exit code.
func runObserve(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("observe", observeUsage, stdout, stderr)
	var paths node.Paths
	paths.AddFlags(fs)
	var (
		once          = fs.Bool("once", false, "print one snapshot and exit (default: one every --interval until interrupted)")
		output        = fs.StringP("output", "o", "table", "output format: json or table")
		interval      = fs.Duration("interval", time.Second, "time between snapshots without --once")
		cgroupVersion = fs.Int("cgroup-version", 0, "1 or 2; 0 detects it")
		memoryFormula = fs.String("memory-formula", "workingSet", "memory.available formula: workingSet (the kubelet's) or memAvailable")
		housekeeping  = fs.Duration("housekeeping-interval", 10*time.Second, "cAdvisor housekeeping and pod disk usage refresh period")
		runtimeSocket = fs.String("runtime-endpoint", "", "CRI socket for imagefs/containerfs and writable layers, e.g. unix:///run/containerd/containerd.sock; empty: detected as run does, none if no socket exists")
		kubeconfig    = fs.String("kubeconfig", "", "kubeconfig to name pods with (in-cluster config when empty and --node-name is set)")
		nodeName      = fs.String("node-name", "", "this node's name, to list its pods from the API server")
		noCAdvisor    = fs.Bool("no-cadvisor", false, "do not start the embedded cAdvisor (imagefs fallback then reads statfs)")
		logs          logFlags
	)
	fs.StringVar(nodeName, "node", "", "this node's name")
	_ = fs.MarkDeprecated("node", "use --node-name")
	logs.addFlags(fs, "text")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if err := paths.Validate(); err != nil {
		return usageError(fs, stderr, err)
	}
	if err := logs.validate(); err != nil {
		return usageError(fs, stderr, err)
	}
	if *output != "json" && *output != "table" {
		return usageError(fs, stderr, fmt.Errorf("--output: value %q: must be json or table", *output))
	}
	formula, err := monitor.ParseMemoryFormula(*memoryFormula)
	if err != nil {
		return usageError(fs, stderr, err)
	}
	logger := logs.logger(stderr, slog.LevelWarn)
	klog.SetSlogLogger(logger) // cAdvisor logs through klog

	cfg := paths.MonitorConfig()
	cfg.CgroupVersion = monitor.CgroupVersion(*cgroupVersion)
	cfg.MemoryFormula, cfg.HousekeepingInterval = formula, *housekeeping
	cfg.DisableCAdvisor, cfg.Logger = *noCAdvisor, logger
	rtEP, err := paths.DetectRuntime(*runtimeSocket)
	if err != nil {
		logger.Warn("runtime socket detection", "err", err)
	}
	if rtEP.From != monitor.RuntimeFromDefault { // a socket was configured or found
		cfg.RuntimeEndpoint = rtEP
		rt, closeRT, err := monitor.DialCRI(rtEP.Endpoint)
		if err != nil {
			fmt.Fprintf(stderr, "evictiond observe: %v\n", err)
			return 1
		}
		defer closeRT()
		cfg.Runtime = rt
	}
	m, err := monitor.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "evictiond observe: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := m.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "evictiond observe: %v\n", err)
		return 1
	}
	defer func() {
		if err := m.Stop(); err != nil {
			logger.Warn("stopping the monitor", "err", err)
		}
	}()

	var lister podLister = &cgroupPodLister{m: m, logger: logger}
	node := *nodeName
	if *kubeconfig != "" || node != "" {
		if node == "" {
			if node, err = os.Hostname(); err != nil {
				fmt.Fprintf(stderr, "evictiond observe: --node-name not given and no hostname: %v\n", err)
				return exitFailure
			}
		}
		api, err := newAPIPodLister(*kubeconfig, node)
		if err != nil {
			fmt.Fprintf(stderr, "evictiond observe: %v\n", err)
			return 1
		}
		lister = api
	}

	for {
		pods, err := lister.pods(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "evictiond observe: listing pods: %v\n", err)
			return 1
		}
		snap := m.Observe(ctx, pods)
		out := buildObserveOutput(node, snap, pods, time.Now())
		if cfg.Runtime != nil {
			out.Runtime = &cfg.RuntimeEndpoint
		}
		if err := writeObserveOutput(stdout, out, *output, *once); err != nil {
			fmt.Fprintf(stderr, "evictiond observe: %v\n", err)
			return 1
		}
		if *once {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*interval):
		}
	}
}

type podLister interface {
	pods(ctx context.Context) ([]monitor.PodRef, error)
}

// cgroupPodLister finds pods in the kubepods cgroup tree.
type cgroupPodLister struct {
	m      *monitor.Monitor
	logger *slog.Logger
	warned bool
}

// A node without a kubepods cgroup (no kubelet yet, or a wrong
// --cgroup-driver/--cgroup-root) still has signals worth showing: it is
// reported once and observed with no pods.
func (l *cgroupPodLister) pods(context.Context) ([]monitor.PodRef, error) {
	pods, err := l.m.DiscoverPods()
	if errors.Is(err, os.ErrNotExist) {
		if !l.warned {
			l.logger.Warn("no kubepods cgroup: observing without pods (check --cgroup-driver and --cgroup-root)", "err", err)
		}
		l.warned = true
		return nil, nil
	}
	return pods, err
}

// apiPodLister lists the node's pods from the API server.
type apiPodLister struct {
	list func(context.Context, metav1.ListOptions) (*v1.PodList, error)
	node string
}

func newAPIPodLister(kubeconfig, node string) (*apiPodLister, error) {
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
	}
	restCfg.UserAgent = "evictiond-observe"
	client, err := daemon.NewClient(restCfg)
	if err != nil {
		return nil, fmt.Errorf("creating the API client: %w", err)
	}
	return &apiPodLister{list: client.CoreV1().Pods(metav1.NamespaceAll).List, node: node}, nil
}

func (l *apiPodLister) pods(ctx context.Context) ([]monitor.PodRef, error) {
	list, err := l.list(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", l.node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods of node %s: %w", l.node, err)
	}
	pods := make([]*v1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	// As the daemon does: a static pod's cgroup goes by its mirror annotation's UID.
	return monitor.PodRefsFromPods(pods), nil
}

// observeOutput is observe's document.
type observeOutput struct {
	Node          string                   `json:"node,omitempty"`
	Time          time.Time                `json:"time"`
	Cgroups       monitor.CgroupInfo       `json:"cgroups"`
	Runtime       *monitor.RuntimeEndpoint `json:"runtime,omitempty"`
	MemoryFormula monitor.MemoryFormula    `json:"memoryFormula"`
	Signals       []signalOutput           `json:"signals"`
	Missing       map[policy.Signal]string `json:"missing,omitempty"`
	Layout        policy.FilesystemLayout  `json:"filesystemLayout"`
	Filesystems   []monitor.Filesystem     `json:"filesystems"`
	Pods          []podOutput              `json:"pods"`
}

type signalOutput struct {
	Signal      policy.Signal  `json:"signal"`
	Available   int64          `json:"available"`
	Capacity    int64          `json:"capacity"`
	Age         string         `json:"age"`
	Time        time.Time      `json:"time"`
	Source      monitor.Source `json:"source"`
	Description string         `json:"description,omitempty"`
}

type podOutput struct {
	UID                   types.UID                  `json:"uid"`
	Namespace             string                     `json:"namespace,omitempty"`
	Name                  string                     `json:"name,omitempty"`
	QOSClass              string                     `json:"qosClass,omitempty"`
	Cgroup                string                     `json:"cgroup,omitempty"`
	MemoryWorkingSetBytes *int64                     `json:"memoryWorkingSetBytes"`
	Processes             *int64                     `json:"processes"`
	EphemeralStorageBytes *int64                     `json:"ephemeralStorageBytes"`
	Containers            map[string]containerOutput `json:"containers,omitempty"`
	Volumes               map[string]volumeOutput    `json:"volumes,omitempty"`
	Error                 string                     `json:"error,omitempty"`
}

type containerOutput struct {
	MemoryWorkingSetBytes *int64 `json:"memoryWorkingSetBytes,omitempty"`
	WritableLayerBytes    *int64 `json:"writableLayerBytes,omitempty"`
	WritableLayerInodes   *int64 `json:"writableLayerInodes,omitempty"`
	LogsBytes             *int64 `json:"logsBytes,omitempty"`
	LogsInodes            *int64 `json:"logsInodes,omitempty"`
}

type volumeOutput struct {
	UsedBytes  *int64 `json:"usedBytes,omitempty"`
	InodesUsed *int64 `json:"inodesUsed,omitempty"`
}

func buildObserveOutput(node string, s *monitor.Snapshot, pods []monitor.PodRef, now time.Time) observeOutput {
	out := observeOutput{
		Node: node, Time: s.Time, Cgroups: s.CgroupInfo, MemoryFormula: s.MemoryFormula,
		Missing: s.Missing, Layout: s.Layout, Filesystems: s.Filesystems,
		Signals: []signalOutput{}, Pods: []podOutput{},
	}
	for _, r := range s.Readings {
		out.Signals = append(out.Signals, signalOutput{
			Signal: r.Signal, Available: r.Available, Capacity: r.Capacity, Time: r.Time,
			Age: now.Sub(r.Time).Round(time.Microsecond).String(), Source: r.Source, Description: r.Description,
		})
	}
	for _, p := range pods {
		ps := s.Pods[p.UID]
		po := podOutput{
			UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOSClass: p.QOSClass, Cgroup: s.PodCgroups[p.UID].Path,
			MemoryWorkingSetBytes: ps.MemoryWorkingSet, Processes: ps.Processes, EphemeralStorageBytes: ps.EphemeralStorageBytes,
			Error: s.PodErrors[p.UID],
		}
		if pc, ok := s.PodCgroups[p.UID]; ok && po.QOSClass == "" {
			po.QOSClass = pc.Pod.QOSClass
		}
		if len(ps.Containers) > 0 {
			po.Containers = map[string]containerOutput{}
			for name, c := range ps.Containers {
				po.Containers[name] = containerOutput{c.MemoryWorkingSet, c.RootfsBytes, c.RootfsInodes, c.LogsBytes, c.LogsInodes}
			}
		}
		if len(ps.Volumes) > 0 {
			po.Volumes = map[string]volumeOutput{}
			for name, v := range ps.Volumes {
				po.Volumes[name] = volumeOutput{v.UsedBytes, v.InodesUsed}
			}
		}
		out.Pods = append(out.Pods, po)
	}
	sort.Slice(out.Pods, func(i, j int) bool {
		a, b := out.Pods[i], out.Pods[j]
		if a.Namespace+"/"+a.Name != b.Namespace+"/"+b.Name {
			return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
		}
		return a.UID < b.UID
	})
	return out
}

func writeObserveOutput(w io.Writer, out observeOutput, format string, once bool) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		if once {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	kubepods := out.Cgroups.Kubepods
	if !out.Cgroups.KubepodsFound {
		kubepods += " (not created yet)"
	}
	runtime := "-"
	if out.Runtime != nil {
		runtime = fmt.Sprintf("%s %s (%s)", out.Runtime.Runtime, out.Runtime.Endpoint, out.Runtime.From)
	}
	fmt.Fprintf(tw, "NODE %s  TIME %s  CGROUP v%d/%s (driver from %s) %s  RUNTIME %s  MEMORY FORMULA %s\n\n", orDash(out.Node), out.Time.Format(time.RFC3339Nano),
		out.Cgroups.Version, out.Cgroups.Driver, out.Cgroups.DriverFrom, kubepods, runtime, out.MemoryFormula)
	fmt.Fprintln(tw, "SIGNAL\tAVAILABLE\tCAPACITY\tAGE\tSOURCE")
	for _, s := range out.Signals {
		capacity := formatValue(s.Signal, s.Capacity)
		if s.Signal.IsPSI() {
			capacity = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Signal, formatValue(s.Signal, s.Available), capacity, s.Age, s.Source)
	}
	missing := make([]string, 0, len(out.Missing))
	for sig := range out.Missing {
		missing = append(missing, string(sig))
	}
	sort.Strings(missing)
	for _, sig := range missing {
		fmt.Fprintf(tw, "%s\t-\t-\t-\tmissing: %s\n", sig, out.Missing[policy.Signal(sig)])
	}
	fmt.Fprintf(tw, "\nFILESYSTEM\tPATH\tDEVICE\tAVAILABLE\tCAPACITY\tINODES FREE\tSOURCE\n")
	for _, f := range out.Filesystems {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", f.Role, f.Path, f.Device, bytesString(f.Available), bytesString(f.Capacity), f.InodesFree, f.Inodes, f.Source)
	}
	fmt.Fprintf(tw, "layout: dedicatedImageFs=%t splitContainerFs=%t\n", out.Layout.DedicatedImageFs, out.Layout.SplitContainerFs)
	fmt.Fprintf(tw, "\nPOD\tQOS\tWORKING SET\tPROCESSES\tEPHEMERAL\tCGROUP\n")
	for _, p := range out.Pods {
		name := string(p.UID)
		if p.Name != "" {
			name = p.Namespace + "/" + p.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, orDash(p.QOSClass), ptrBytes(p.MemoryWorkingSetBytes), ptrInt(p.Processes), ptrBytes(p.EphemeralStorageBytes), orDash(p.Cgroup))
		if p.Error != "" {
			fmt.Fprintf(tw, "  error: %s\n", p.Error)
		}
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

func formatValue(sig policy.Signal, v int64) string {
	switch {
	case sig.IsPSI():
		// Headroom on PSIScale; people read the stall it leaves.
		return fmt.Sprintf("%.2f%% stall", float64(policy.PSIScale-v)/100)
	case sig.InBytes():
		return bytesString(v)
	default:
		return fmt.Sprint(v)
	}
}

// bytesString is a byte count for people: 1.5Gi, 300Mi, 12Ki, 512.
func bytesString(v int64) string {
	abs := v
	if abs < 0 {
		abs = -abs
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if abs >= u.size {
			return fmt.Sprintf("%.1f%s", float64(v)/float64(u.size), u.suffix)
		}
	}
	return fmt.Sprint(v)
}

func ptrBytes(p *int64) string {
	if p == nil {
		return "-"
	}
	return bytesString(*p)
}

func ptrInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
