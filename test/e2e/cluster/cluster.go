//go:build e2e

// Package cluster boots a real one-node Kubernetes cluster on this machine for the
// end-to-end tests: etcd, kube-apiserver and kube-controller-manager (internal/testenv/
// apiserver), a second controller manager for the workload controllers (DaemonSet,
// Deployment, ReplicaSet), kube-scheduler, a private containerd with a CNI bridge, and a
// kubelet whose kubepods cgroup has a real memory limit. Everything lives under one
// temporary directory; the teardown stops every process, removes the pods' cgroups, mounts,
// bridge and log links, restores the kernel settings the kubelet changed, and removes the
// directory.
//
// It needs root, the Kubernetes binaries (make k8s-binaries) and the Debian packages etcd-server,
// containerd, runc, containernetworking-plugins, busybox-static and iproute2 (make e2e-deps).
//
//	func TestScenarios(t *testing.T) {
//		c := cluster.Start(t, cluster.Options{})
//		t.Run("Memory", func(t *testing.T) { ... c.Client ... })
//	}
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/internal/testenv/apiserver"
	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// NodeName is the name the kubelet registers its Node under.
const NodeName = "evictiond-e2e"

// BridgeName is the CNI bridge the pods' veths attach to; removed at teardown.
const BridgeName = "evde2e0"

// PodSubnet is the host-local IPAM range of the bridge network.
const PodSubnet = "10.244.0.0/24"

// Options shape the cluster. The zero value is what the scenarios use.
type Options struct {
	// PodsMemoryBytes is the memory limit of the kubepods cgroup, enforced by the kubelet
	// (enforceNodeAllocatable: [pods]) with systemReserved = MemTotal - PodsMemoryBytes, so
	// pods feel real memory pressure while the machine stays safe. Default 3 GiB.
	PodsMemoryBytes int64
	// PodsPIDs, when set, is the kubepods cgroup's pids.max, enforced by the kubelet as the
	// memory limit is (systemReserved pid = the node's PID capacity - PodsPIDs): pods share
	// that budget, and a fork bomb among them can never take the PIDs of the machine's own
	// processes. Zero: no PID reservation (kubepods' pids.max is the node's capacity).
	PodsPIDs int64
	// NodeFsBytes, when set, puts the kubelet's root dir (nodefs: emptyDirs, pods' volumes) on
	// a filesystem of its own of that size: an ext4 image in the cluster directory, loop-mounted
	// at KubeletRootDir, so a disk filler fills that and never the machine's own filesystem.
	// The image is sparse: the machine's disk holds only what is written to it.
	NodeFsBytes int64
	// KubeletEvictionHard is the kubelet's hard eviction thresholds: the backstop below
	// evictiond's. Default DefaultKubeletEvictionHard.
	KubeletEvictionHard map[string]string
	// KubeletPressureTransitionPeriod is the kubelet's evictionPressureTransitionPeriod.
	// Default 30 s (the kubelet's 5 min would hold MemoryPressure, and the admission
	// rejection of BestEffort pods, long after each scenario).
	KubeletPressureTransitionPeriod time.Duration
	// KubeletKernelMemcgNotification turns on the kubelet's memcg threshold notifier.
	KubeletKernelMemcgNotification bool
	// AuditLog turns on the API server's audit log (Cluster.API.AuditLogPath), which gives
	// the exact time of each eviction request.
	AuditLog bool
	// StartTimeout bounds each wait of the boot. Default 3 min (the machine is shared).
	StartTimeout time.Duration
	// KeepDir keeps the cluster directory (every component's log) after the teardown;
	// also turned on by EVICTIOND_E2E_KEEP=1.
	KeepDir bool
}

// DefaultKubeletEvictionHard keeps the kubelet's eviction as a backstop only: low enough
// that evictiond acts first, and far from what other work on a shared machine causes.
var DefaultKubeletEvictionHard = map[string]string{
	"memory.available":            "100Mi",
	"allocatableMemory.available": "100Mi",
	"nodefs.available":            "1%",
	"nodefs.inodesFree":           "1%",
	"imagefs.available":           "1%",
	"imagefs.inodesFree":          "1%",
}

// Cluster is a running one-node cluster.
type Cluster struct {
	// Dir holds everything: component logs, kubelet root, containerd, CNI state.
	Dir string
	// API is the control plane (etcd, kube-apiserver, kube-controller-manager).
	API *apiserver.Env
	// Client and Config are admin (system:masters) clients.
	Client kubernetes.Interface
	Config *rest.Config
	// KubeconfigPath is an admin kubeconfig, for kubectl.
	KubeconfigPath string
	// Containerd is the node's container runtime.
	Containerd *containerd.Containerd
	// KubeletRootDir is the kubelet's --root-dir (pods, volumes, emptyDirs).
	KubeletRootDir string
	// PodLogsDir is the kubelet's podLogsDir.
	PodLogsDir string
	// PodsMemoryLimitBytes is the kubepods cgroup's memory limit as the kernel reports it.
	PodsMemoryLimitBytes int64
	// KubeletConfig is the configuration the kubelet runs with.
	KubeletConfig kubeletv1beta1.KubeletConfiguration
	// BootDuration is how long Start took until the Node was Ready.
	BootDuration time.Duration
	// RecordsTrace: the deployed agent records a trace (DeployOptions.ExtraArgs
	// has --record-trace), in StateDir.
	RecordsTrace bool

	opts           Options
	workloadImages []images.Spec
	host           *hostState
	kubelet        *proc.Process
	scheduler      *proc.Process
	controllers    *proc.Process
	scraper        scraper
	failureLogDir  string
}

// Start boots the cluster and waits until the Node is Ready. It fails the test with the
// failing component's log tail if anything does not come up, and registers the teardown.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	begin := time.Now()
	setDefaults(&opts)
	if os.Geteuid() != 0 {
		t.Fatal("the e2e cluster needs root (cgroups, mounts, network namespaces): run `make test-e2e` as root")
	}
	binDir := apiserver.DefaultBinDir()
	for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			t.Fatalf("%s %s not found in %s: build it with `make k8s-binaries` (hack/k8s-binaries.sh), or set EVICTIOND_K8S_BIN: %v",
				name, apiserver.K8sVersion, binDir, err)
		}
	}
	for bin, pkg := range map[string]string{"ip": "iproute2", "etcd": "etcd-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found in PATH: install Debian package %s (make e2e-deps)", bin, pkg)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", plugin)); err != nil {
			t.Fatalf("CNI plugin %s not found in /usr/lib/cni: install Debian package containernetworking-plugins (make e2e-deps)", plugin)
		}
	}
	host, err := snapshotHost()
	if err != nil {
		t.Fatalf("e2e cluster: %v", err)
	}
	dir, err := os.MkdirTemp("", "evictiond-e2e-")
	if err != nil {
		t.Fatalf("creating the cluster directory: %v", err)
	}
	c := &Cluster{
		Dir:            dir,
		KubeletRootDir: filepath.Join(dir, "kubelet"),
		PodLogsDir:     filepath.Join(dir, "pod-logs"),
		opts:           opts,
		host:           host,
	}
	// Cleanups run last-registered first: this one (host state, mounts, directory) runs
	// after the kubelet, containerd and the control plane are stopped.
	t.Cleanup(func() { c.cleanupHost(t) })

	// The control plane boots in the background while containerd starts and the images are
	// built and imported here (containerd.Start must run on the test goroutine).
	type apiResult struct {
		env *apiserver.Env
		err error
	}
	apiDone := make(chan apiResult, 1)
	go func() {
		// No kube-proxy: the API server reaches webhooks (evictiond's eviction webhook) at
		// their Service's endpoints, not its cluster IP.
		env, err := apiserver.Start(apiserver.Options{StartTimeout: opts.StartTimeout, AuditLog: opts.AuditLog,
			ExtraAPIServerArgs: []string{"--enable-aggregator-routing=true"}})
		apiDone <- apiResult{env, err}
	}()
	var apiCollected bool
	collectAPI := func() error {
		if apiCollected {
			return nil
		}
		apiCollected = true
		r := <-apiDone
		c.API = r.env
		return r.err
	}
	t.Cleanup(func() {
		if err := collectAPI(); err == nil && c.API != nil {
			c.API.Stop()
		}
	})

	c.Containerd = containerd.Start(t, containerd.Options{ParentDir: dir, StartTimeout: opts.StartTimeout})
	if err := writeCNIConfig(c.Containerd.CNIConfDir, filepath.Join(dir, "cni-ipam")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	workloadImages, err := importImages(ctx, c.Containerd, filepath.Join(dir, "workloads"))
	if err != nil {
		t.Fatalf("importing the pause and workload images: %v", err)
	}
	c.workloadImages = workloadImages

	if err := collectAPI(); err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	c.Client, c.Config, c.KubeconfigPath = c.API.Client, c.API.Config, c.API.KubeconfigPath

	// Stop order at teardown: kubelet first (so it does not restart what containerd's
	// cleanup removes), then scheduler and controllers; containerd and the control plane
	// follow through their own cleanups.
	t.Cleanup(func() { c.stopComponents(t) })
	if err := c.startControlPlaneExtras(binDir); err != nil {
		t.Fatal(err)
	}
	if opts.NodeFsBytes > 0 {
		if err := c.mountNodeFs(opts.NodeFsBytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.startKubelet(binDir); err != nil {
		t.Fatal(err)
	}
	if err := c.waitNodeReady(ctx); err != nil {
		t.Fatal(err)
	}
	limit, err := readPodsMemoryLimit()
	if err != nil {
		t.Fatal(err)
	}
	c.PodsMemoryLimitBytes = limit
	c.BootDuration = time.Since(begin)
	t.Logf("e2e cluster up in %s: node %s Ready, kubepods memory limit %d MiB, dir %s",
		c.BootDuration.Round(time.Millisecond), NodeName, limit>>20, dir)
	return c
}

func setDefaults(opts *Options) {
	if opts.PodsMemoryBytes == 0 {
		opts.PodsMemoryBytes = 3 << 30
	}
	if opts.KubeletEvictionHard == nil {
		opts.KubeletEvictionHard = DefaultKubeletEvictionHard
	}
	if opts.KubeletPressureTransitionPeriod == 0 {
		opts.KubeletPressureTransitionPeriod = 30 * time.Second
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if os.Getenv("EVICTIOND_E2E_KEEP") == "1" {
		opts.KeepDir = true
	}
}

// writeCNIConfig writes a bridge + host-local network. No masquerading: pods only talk to
// each other and the node, and the machine's iptables stay untouched.
func writeCNIConfig(confDir, ipamDir string) error {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "evictiond-e2e",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      BridgeName,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": PodSubnet}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": ipamDir,
				},
			},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the CNI conflist: %w", err)
	}
	path := filepath.Join(confDir, "10-evictiond-e2e.conflist")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// startControlPlaneExtras starts what the testenv control plane leaves out: kube-scheduler,
// the workload controllers and the node lifecycle controller, which removes the not-ready
// taint the kubelet registers the Node with (its controller manager runs only what the API
// tier needs).
func (c *Cluster) startControlPlaneExtras(binDir string) error {
	c.scheduler = &proc.Process{
		Name:    "kube-scheduler",
		Path:    filepath.Join(binDir, "kube-scheduler"),
		LogPath: filepath.Join(c.Dir, "kube-scheduler.log"),
		Args: []string{
			"--kubeconfig=" + c.KubeconfigPath,
			"--authentication-kubeconfig=" + c.KubeconfigPath,
			"--authorization-kubeconfig=" + c.KubeconfigPath,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=0",
			"--v=1",
		},
	}
	c.controllers = &proc.Process{
		Name:    "kube-controller-manager (workloads, node lifecycle)",
		Path:    filepath.Join(binDir, "kube-controller-manager"),
		LogPath: filepath.Join(c.Dir, "kube-controller-manager-workloads.log"),
		Args: []string{
			"--kubeconfig=" + c.KubeconfigPath,
			"--controllers=daemonset-controller,deployment-controller,replicaset-controller,node-lifecycle-controller,endpoints-controller,endpointslice-controller",
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		},
	}
	for _, p := range []*proc.Process{c.scheduler, c.controllers} {
		if err := p.Start(); err != nil {
			return p.Failure(err)
		}
	}
	return nil
}

func (c *Cluster) startKubelet(binDir string) error {
	total, err := memTotalBytes()
	if err != nil {
		return err
	}
	reserved := total - c.opts.PodsMemoryBytes
	if reserved <= 0 {
		return fmt.Errorf("Options.PodsMemoryBytes=%d: must be below the machine's memory (%d bytes)", c.opts.PodsMemoryBytes, total)
	}
	systemReserved := map[string]string{"memory": strconv.FormatInt(reserved, 10)}
	if c.opts.PodsPIDs > 0 {
		capacity, err := NodePIDCapacity()
		if err != nil {
			return err
		}
		if c.opts.PodsPIDs >= capacity {
			return fmt.Errorf("Options.PodsPIDs=%d: must be below the node's PID capacity (%d)", c.opts.PodsPIDs, capacity)
		}
		systemReserved["pid"] = strconv.FormatInt(capacity-c.opts.PodsPIDs, 10)
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		// This machine runs cgroup v1, which kubelet 1.35 refuses by default.
		FailCgroupV1: ptr.To(false),
		// containerd 2 answers the CRI RuntimeConfig call and the kubelet then uses its
		// driver instead of this one; the testenv's runc runtime has SystemdCgroup = false,
		// so both say cgroupfs.
		CgroupDriver:             "cgroupfs",
		CgroupsPerQOS:            ptr.To(true),
		CgroupRoot:               "/",
		FailSwapOn:               ptr.To(false),
		ContainerRuntimeEndpoint: c.Containerd.Endpoint,
		// Loopback only: nothing outside this machine needs the kubelet's API.
		Address:            "127.0.0.1",
		Port:               int32(ports[0]),
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To(int32(ports[1])),
		ReadOnlyPort:       0,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		PodLogsDir:    c.PodLogsDir,
		// Its default is under /usr/libexec, which the kubelet would create.
		VolumePluginDir: filepath.Join(c.Dir, "volume-plugins"),
		// The kubelet must not add its iptables canary chains to the machine.
		MakeIPTablesUtilChains: ptr.To(false),
		// kubepods gets a limit of MemTotal - reserved: real pressure, safe machine (and
		// pids.max = PodsPIDs when set).
		SystemReserved:                   systemReserved,
		EnforceNodeAllocatable:           []string{"pods"},
		EvictionHard:                     c.opts.KubeletEvictionHard,
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: c.opts.KubeletPressureTransitionPeriod},
		KernelMemcgNotification:          c.opts.KubeletKernelMemcgNotification,
		// No periodic image GC (as kind's nodes): this machine's disk counts as 80-85 % used
		// (a large root reserve), and the kubelet's 5-minute GC at 85 % removed every unused
		// image: with containerd 1.6 the pause image too (1.6 did not report it pinned; 2.x
		// does), and every pod start after it failed (make bench-ramp, 5.5 min into a
		// cluster). It would still remove the workload images, imported once per cluster.
		// Disk reclaim is evictiond's (and the kubelet eviction manager's, which does not
		// depend on this).
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		// ConfigMap volume updates reach pods on the kubelet's pod sync: 10 s instead of
		// 1 min keeps the hot-reload scenario short.
		SyncFrequency: metav1.Duration{Duration: 10 * time.Second},
	}
	c.KubeletConfig = cfg
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding the kubelet configuration: %w", err)
	}
	cfgPath := filepath.Join(c.Dir, "kubelet-config.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", cfgPath, err)
	}
	c.kubelet = &proc.Process{
		Name:    "kubelet",
		Path:    filepath.Join(binDir, "kubelet"),
		LogPath: filepath.Join(c.Dir, "kubelet.log"),
		Args: []string{
			"--config=" + cfgPath,
			"--kubeconfig=" + c.KubeconfigPath,
			"--root-dir=" + c.KubeletRootDir,
			"--cert-dir=" + filepath.Join(c.Dir, "kubelet-pki"),
			"--hostname-override=" + NodeName,
			// cAdvisor's containerd factory has its own socket setting; without it the
			// kubelet's container stats would miss every container of this containerd.
			"--containerd=" + c.Containerd.Socket,
			"--v=2",
		},
	}
	if err := c.kubelet.Start(); err != nil {
		return c.kubelet.Failure(err)
	}
	return nil
}

// waitNodeReady waits until the kubelet has registered the Node, reports it Ready (which
// needs the CRI's runtime and network to be ready) and the node lifecycle controller has
// lifted the not-ready taint, so pods schedule. It fails early if a component exits.
func (c *Cluster) waitNodeReady(ctx context.Context) error {
	var last string
	var exited error // a component that died: reported as is, with its own log
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range []*proc.Process{c.kubelet, c.scheduler, c.controllers} {
			if !p.Running() {
				exited = p.Failure(errors.New("exited during the boot"))
				return false, exited
			}
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := false
		last = "no Ready condition yet"
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
				ready = cond.Status == corev1.ConditionTrue
			}
		}
		for _, taint := range node.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady {
				last += "; taint " + taint.ToString() + " still set"
				return false, nil
			}
		}
		return ready, nil
	})
	if exited != nil {
		return exited
	}
	if err != nil {
		return c.kubelet.Failure(fmt.Errorf("waiting for node %s to be Ready: %w (last seen: %s)", NodeName, err, last))
	}
	return nil
}

// readPodsMemoryLimit reads the limit the kubelet put on the kubepods cgroup.
func readPodsMemoryLimit() (int64, error) {
	for _, path := range []string{"/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes", "/sys/fs/cgroup/kubepods/memory.max"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %s = %q: %w", path, data, err)
		}
		return v, nil
	}
	return 0, errors.New("kubepods memory cgroup not found: the kubelet did not create it (see kubelet.log)")
}

// LogPath returns the log file of a component: "kubelet", "kube-scheduler",
// "kube-controller-manager-workloads", "containerd", or one of the control plane's.
func (c *Cluster) LogPath(component string) string {
	switch component {
	case "containerd":
		return c.Containerd.LogPath
	case "etcd", "kube-apiserver", "kube-controller-manager":
		return c.API.LogPath(component)
	}
	return filepath.Join(c.Dir, component+".log")
}

// LogTail returns the last n lines of a component's log (see LogPath).
func (c *Cluster) LogTail(component string, n int) string {
	return proc.Tail(c.LogPath(component), n)
}

// KeepLog copies a log of a failed test into FailureLogDir under name (evictiond's, for
// example, which goes with its pod) and says where in one line. The logs are kept in files
// rather than printed: tails of four components printed after the failure buried the
// failure's own message at the end of the output, where CI shows it.
func (c *Cluster) KeepLog(t testing.TB, name, path string) {
	dir := c.FailureLogDir(t)
	data, err := os.ReadFile(path)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".log"), data, 0o644)
	}
	if err != nil {
		t.Logf("keeping the %s log: %v", name, err)
		return
	}
	t.Logf("%s log kept: %s", name, filepath.Join(dir, name+".log"))
}

// FailureLogDir is where a failed test's logs are kept, created on first use:
// $TMPDIR/evictiond-e2e-failed/<test>-<time>, outside the cluster's directory (removed at
// teardown).
func (c *Cluster) FailureLogDir(t testing.TB) string {
	if c.failureLogDir == "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		c.failureLogDir = filepath.Join(os.TempDir(), "evictiond-e2e-failed", name+"-"+time.Now().UTC().Format("20060102T150405"))
		if err := os.MkdirAll(c.failureLogDir, 0o755); err != nil {
			t.Logf("creating %s: %v", c.failureLogDir, err)
		}
	}
	return c.failureLogDir
}

func (c *Cluster) stopComponents(t testing.TB) {
	if t.Failed() {
		for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager-workloads", "containerd"} {
			c.KeepLog(t, name, c.LogPath(name))
		}
	}
	c.kubelet.Stop(20 * time.Second)
	c.scheduler.Stop(10 * time.Second)
	c.controllers.Stop(10 * time.Second)
}

// cleanupHost runs after every process is gone: unmount what the kubelet mounted, restore
// host state, remove the directory.
func (c *Cluster) cleanupHost(t testing.TB) {
	if err := proc.UnmountUnder(c.Dir); err != nil {
		t.Errorf("e2e cluster teardown: %v", err)
	}
	if err := c.host.restore(c.PodLogsDir, BridgeName); err != nil {
		t.Errorf("e2e cluster teardown: %v", err)
	}
	if c.opts.KeepDir {
		t.Logf("e2e cluster directory kept: %s", c.Dir)
		return
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Errorf("e2e cluster teardown: removing %s: %v", c.Dir, err)
	}
}

// freePorts reserves n distinct loopback ports (closed before use: a small race no run has
// lost yet).
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// mountNodeFs creates a sparse ext4 image of size bytes in the cluster directory and
// loop-mounts it at KubeletRootDir (cleanupHost unmounts everything under the directory; the
// loop device is released with the last unmount, mount(8)'s autoclear).
func (c *Cluster) mountNodeFs(size int64) error {
	image := filepath.Join(c.Dir, "nodefs.img")
	f, err := os.Create(image)
	if err != nil {
		return fmt.Errorf("creating the nodefs image: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("sizing the nodefs image: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", image).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", image, err, out)
	}
	if err := os.MkdirAll(c.KubeletRootDir, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-o", "loop", image, c.KubeletRootDir).CombinedOutput(); err != nil {
		return fmt.Errorf("mounting %s at %s: %w: %s", image, c.KubeletRootDir, err, out)
	}
	return nil
}
