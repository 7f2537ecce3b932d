//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/metricsserver"
	"github.com/evictiond/evictiond/internal/testenv/apiserver"
	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// env is the real control plane every daemon test talks to; started by
// TestMain only when the package's integration tests that need it run.
var env *apiserver.Env

// runMainEnv makes the test binary act as the evictiond binary (see
// TestMain), so a test can send a real SIGTERM to a real process.
const runMainEnv = "EVICTIOND_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
	}
	if !needsAPIServer() {
		os.Exit(m.Run())
	}
	var err error
	// The fleet benchmark counts requests at the agents' transports; an
	// audit log would only add to the API server's CPU it measures.
	env, err = apiserver.Start(apiserver.Options{AuditLog: !benchFleetOnly()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server environment (make test-daemon installs etcd and builds kube-apiserver):", err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// benchFleetOnly: the run selects BenchmarkFleet and no test.
func benchFleetOnly() bool {
	var bench, run bool
	for _, arg := range os.Args[1:] {
		if v, ok := strings.CutPrefix(arg, "-test.bench="); ok && strings.Contains(v, "Fleet") {
			bench = true
		}
		if v, ok := strings.CutPrefix(arg, "-test.run="); ok && v != "^$" {
			run = true
		}
	}
	return bench && !run
}

// needsAPIServer is false when -run selects only the tests that need no API
// server (the observe tests of the monitor tier), so they stay fast.
func needsAPIServer() bool {
	for _, arg := range os.Args[1:] {
		if v, ok := strings.CutPrefix(arg, "-test.run="); ok && strings.HasPrefix(v, "^TestObserve") {
			return false
		}
	}
	return true
}

// syncBuffer is the daemon's log: written by its goroutines, read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// configMapDir lays out a directory the way the kubelet mounts a ConfigMap:
// the file is a symlink through "..data", itself a symlink to a timestamped
// directory, and an update swaps "..data" with one rename.
type configMapDir struct {
	dir string
	gen int
}

func newConfigMapDir(t *testing.T, content string) *configMapDir {
	t.Helper()
	c := &configMapDir{dir: t.TempDir()}
	c.update(t, content)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(c.dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *configMapDir) path() string { return filepath.Join(c.dir, "config.yaml") }

// update is the kubelet's atomic writer: new timestamped directory, a
// "..data_tmp" symlink to it renamed over "..data", old directory removed.
func (c *configMapDir) update(t *testing.T, content string) {
	t.Helper()
	c.gen++
	ts := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), c.gen)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, ts, "config.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(c.dir, "..data"))
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// testConfig is a configuration for the daemon under test: thresholds as
// given, a short loop, the private containerd, state in a temp dir.
func testConfig(evictionHard, criEndpoint, stateDir string, extra ...string) string {
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
%s
loop: {interval: 200ms, podCleanupTimeout: 5s}
stats: {housekeepingInterval: 1s}
reclaim:
  criEndpoint: %s
  imageGC: {stateFile: %s}
`, evictionHard, criEndpoint, filepath.Join(stateDir, "images.json")) + strings.Join(extra, "\n")
}

// runningDaemon is one evictiond run in-process against the test environment.
type runningDaemon struct {
	node    string
	url     string
	config  *configMapDir
	log     *syncBuffer
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

type daemonOptions struct {
	evictionHard string
	// extra lines of the configuration file
	extra  []string
	dryRun bool
	// legacySignalMetrics: run --legacy-signal-metrics.
	legacySignalMetrics bool
	ctrd                *containerd.Containerd
	// noWait returns without waiting for /readyz.
	noWait bool
}

// startDaemon creates the Node, a private cgroup root with a kubepods tree on
// this machine's cgroup v1 hierarchy, and runs runDaemon until the test ends.
func startDaemon(t *testing.T, node string, o daemonOptions) *runningDaemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the daemon tests create cgroups and run containerd: run them as root (make test-daemon)")
	}
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		createNode(t, node)
	}
	if o.ctrd == nil {
		o.ctrd = containerd.Start(t, containerd.Options{})
	}
	cgroupRoot := makeCgroupRoot(t)
	stateDir := t.TempDir()
	cm := newConfigMapDir(t, testConfig(o.evictionHard, o.ctrd.Endpoint, stateDir, o.extra...))
	addr := freeAddress(t)
	// Plain /metrics with the probes on one address: the secure endpoint has its own
	// tests against this API server (internal/metricsserver).
	f := &runFlags{ProcessOptions: daemon.ProcessOptions{ConfigPath: cm.path(), Kubeconfig: env.KubeconfigPath, NodeName: node,
		Serving: metricsserver.Flags{MetricsAddress: addr, HealthAddress: addr, Secure: false}, DryRun: o.dryRun,
		LegacySignalMetrics: o.legacySignalMetrics}}
	f.Node.KubeletRootDir, f.Node.PodLogsDir, f.Node.ImageFsDir = t.TempDir(), t.TempDir(), t.TempDir()
	f.Node.CgroupDriver, f.Node.CgroupRoot = "cgroupfs", cgroupRoot
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
	runCtx, cancel := context.WithCancel(ctx)
	d := &runningDaemon{node: node, url: "http://" + addr, config: cm, log: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- runDaemon(runCtx, f, log) }()
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	if !o.noWait {
		d.waitReady(t, 90*time.Second)
	}
	return d
}

// stop cancels the daemon and fails the test if it does not return cleanly
// within a few seconds.
func (d *runningDaemon) stop(t *testing.T) time.Duration {
	t.Helper()
	if d.stopped {
		return 0
	}
	d.stopped = true
	start := time.Now()
	d.cancel()
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("runDaemon returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("runDaemon did not return within 10s of cancel")
	}
	return time.Since(start)
}

func (d *runningDaemon) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var code int
	var body string
	for time.Now().Before(deadline) {
		select {
		case err := <-d.done:
			t.Fatalf("runDaemon returned before ready: %v\nlog:\n%s", err, d.log.String())
		default:
		}
		code, body = httpGet(d.url + "/readyz")
		if code == http.StatusOK {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("/readyz not 200 within %v: last %d %s", timeout, code, body)
}

// metricValue returns the value of the sample with exactly this name and
// label set (as printed, e.g. `evictiond_threshold_bytes{kind="hard",signal="memory.available"}`).
func (d *runningDaemon) metricValue(t *testing.T, series string) (float64, bool) {
	t.Helper()
	code, body := httpGet(d.url + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d: %s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: value %q: %v", series, v, err)
			}
			return f, true
		}
	}
	return 0, false
}

func (d *runningDaemon) waitMetric(t *testing.T, series string, want func(float64) bool, what string, timeout time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last float64
	var seen bool
	for time.Now().Before(deadline) {
		if last, seen = d.metricValue(t, series); seen && want(last) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: want %s within %v; last value %v (present %v)", series, what, timeout, last, seen)
	return 0
}

func (d *runningDaemon) waitReadyz(t *testing.T, wantCode int, wantInBody string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var code int
	var body string
	for time.Now().Before(deadline) {
		code, body = httpGet(d.url + "/readyz")
		if code == wantCode && strings.Contains(body, wantInBody) {
			return body
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("/readyz: want %d naming %q within %v; last %d:\n%s", wantCode, wantInBody, timeout, code, body)
	return ""
}

func httpGet(url string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func freeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func createNode(t testing.TB, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("24Gi"), corev1.ResourceCPU: resource.MustParse("2"),
			corev1.ResourcePods: resource.MustParse("110")}}}
	if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
}

// createPods creates BestEffort pods bound to node (no kubelet runs them, so
// they stay Pending, which is still a live pod to the agent).
func createPods(t testing.TB, namespace, node string, n int) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("workload-%d", i), Namespace: namespace},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		created, err := env.Client.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s/%s: %v", namespace, p.Name, err)
		}
		pods = append(pods, created)
	}
	return pods
}

// makeCgroupRoot makes a private kubelet cgroup root (with kubepods and its
// QoS children) on this machine's cgroup v1 controllers.
func makeCgroupRoot(t testing.TB) string {
	t.Helper()
	root := fmt.Sprintf("/evictiond-test-run-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	var made []string
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			for range 50 {
				if err := os.Remove(made[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct", "devices"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl)); err != nil {
			continue // cpu and cpuacct may be one co-mounted hierarchy under another name
		}
		for _, p := range []string{"", "/kubepods", "/kubepods/burstable", "/kubepods/besteffort"} {
			dir := filepath.Join("/sys/fs/cgroup", ctl, root+p)
			if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
				t.Fatalf("creating cgroup %s: %v (is the cgroup v1 %s controller mounted?)", dir, err, ctl)
			}
			made = append(made, dir)
		}
	}
	return root
}

// makePodCgroups makes the BestEffort pod cgroups of pods under a root of
// makeCgroupRoot, on the memory and pids controllers, removed at the end.
func makePodCgroups(t testing.TB, root string, pods []*corev1.Pod) {
	t.Helper()
	var made []string
	t.Cleanup(func() {
		for _, dir := range made {
			_ = os.Remove(dir)
		}
	})
	for _, ctl := range []string{"memory", "pids"} {
		for _, p := range pods {
			dir := filepath.Join("/sys/fs/cgroup", ctl, root, "kubepods", "besteffort", "pod"+string(p.UID))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatalf("creating cgroup %s: %v", dir, err)
			}
			made = append(made, dir)
		}
	}
}

// nodeEvents lists Events about the node with the given reason.
func eventsWithReason(t *testing.T, namespace, reason string) []corev1.Event {
	t.Helper()
	list, err := env.Client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
	if err != nil {
		t.Fatalf("listing %s Events: %v", reason, err)
	}
	return list.Items
}

func waitEvents(t *testing.T, namespace, reason string, match func(corev1.Event) bool, timeout time.Duration) []corev1.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var out []corev1.Event
		for _, e := range eventsWithReason(t, namespace, reason) {
			if match(e) {
				out = append(out, e)
			}
		}
		if len(out) > 0 {
			return out
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("no %s Event in namespace %q within %v", reason, namespace, timeout)
	return nil
}

const (
	memoryHardThreshold = `evictiond_threshold_bytes{kind="hard",signal="memory.available"}`
	// legacyMemoryHardThreshold is its family of mixed units (--legacy-signal-metrics).
	legacyMemoryHardThreshold = `evictiond_threshold{kind="hard",signal="memory.available"}`
)

// TestRunReloadsConfigMapSwapAndRejectsInvalidFile proves hot reload through
// the kubelet's "..data" symlink swap done for real on disk: a valid file is
// applied (its threshold shows in /metrics), an invalid one is rejected with
// a log line, a ConfigRejected Event on the Node and the reload gauge at 0,
// and the last good threshold stays. With --legacy-signal-metrics the
// threshold's family of mixed units follows too.
func TestRunReloadsConfigMapSwapAndRejectsInvalidFile(t *testing.T) {
	d := startDaemon(t, "reload-node", daemonOptions{evictionHard: "  memory.available: 100Mi", legacySignalMetrics: true})
	stateDir := t.TempDir()
	criEndpoint := regexp.MustCompile(`criEndpoint: (\S+)`).FindStringSubmatch(readFile(t, d.config.path()))[1]

	d.waitMetric(t, memoryHardThreshold, eq(100<<20), "100Mi from the first file", 10*time.Second)
	d.waitMetric(t, legacyMemoryHardThreshold, eq(100<<20), "100Mi in the legacy family too", time.Second)
	d.waitMetric(t, "evictiond_config_last_reload_successful", eq(1), "1 at start", 5*time.Second)

	d.config.update(t, testConfig("  memory.available: 200Mi", criEndpoint, stateDir))
	d.waitMetric(t, memoryHardThreshold, eq(200<<20), "200Mi after the valid swap", 15*time.Second)
	d.waitMetric(t, legacyMemoryHardThreshold, eq(200<<20), "200Mi in the legacy family too", time.Second)
	d.waitMetric(t, `evictiond_config_reloads_total{result="success"}`, eq(1), "one successful reload", 5*time.Second)

	// A negative quantity breaks the threshold rule; the rest of the file is fine.
	d.config.update(t, testConfig("  memory.available: -5Mi", criEndpoint, stateDir))
	d.waitMetric(t, "evictiond_config_last_reload_successful", eq(0), "0 after the invalid swap", 15*time.Second)
	d.waitMetric(t, `evictiond_config_reloads_total{result="rejected"}`, eq(1), "one rejected reload", 5*time.Second)
	// Several passes later the last good threshold is still in force.
	time.Sleep(time.Second)
	if v, _ := d.metricValue(t, memoryHardThreshold); v != 200<<20 {
		t.Errorf("after the rejected file the hard memory threshold is %v, want the last good 200Mi (%d)", v, 200<<20)
	}
	if !strings.Contains(d.log.String(), `"msg":"configuration rejected; the previous configuration stays in force"`) ||
		!strings.Contains(d.log.String(), "evictionHard[memory.available]") {
		t.Errorf("the log does not report the rejection naming the field:\n%s", d.log.String())
	}
	events := waitEvents(t, "default", "ConfigRejected", func(e corev1.Event) bool {
		return e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == d.node
	}, 15*time.Second)
	if e := events[0]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "evictionHard[memory.available]") ||
		!strings.Contains(e.Message, "-5Mi") {
		t.Errorf("ConfigRejected Event %s %q: want a Warning naming the field and the value", e.Type, e.Message)
	}

	// A valid file after the rejected one is applied again and clears the gauge.
	d.config.update(t, testConfig("  memory.available: 300Mi", criEndpoint, stateDir))
	d.waitMetric(t, memoryHardThreshold, eq(300<<20), "300Mi after a valid swap", 15*time.Second)
	d.waitMetric(t, "evictiond_config_last_reload_successful", eq(1), "1 again", 5*time.Second)

	if took := d.stop(t); took > 5*time.Second {
		t.Errorf("shutdown took %v, want under 5s", took)
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// auditEvent is the part of an audit.k8s.io/v1 Event the write count needs.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	Stage      string `json:"stage"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// daemonUserAgent is the user agent runDaemon's client sends; the test's own
// clients send the test binary's name (e.g. "evictiond.test/...").
const daemonUserAgent = "evictiond"

// countAgentRequests counts the agent's requests for uri since `since`.
func countAgentRequests(t *testing.T, since time.Time, uri string) int {
	t.Helper()
	data, err := os.ReadFile(env.AuditLogPath)
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	var n int
	for _, line := range bytes.Split(data, []byte("\n")) {
		var e auditEvent
		if len(line) == 0 || json.Unmarshal(line, &e) != nil {
			continue
		}
		if e.Stage == "ResponseComplete" && e.UserAgent == daemonUserAgent && e.RequestURI == uri && !e.RequestReceivedTimestamp.Before(since) {
			n++
		}
	}
	return n
}

// agentWrites returns the write requests evictiond
// made since `since`, from the API server's audit log.
func agentWrites(t *testing.T, since time.Time) []auditEvent {
	t.Helper()
	f, err := os.Open(env.AuditLogPath)
	if err != nil {
		t.Fatalf("opening the audit log: %v", err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		if e.Stage != "ResponseComplete" || e.UserAgent != daemonUserAgent || e.RequestReceivedTimestamp.Before(since) {
			continue
		}
		switch e.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	return out
}

// TestRunDryRunRecordsWouldEvictAndWritesNothingElse runs the daemon with
// --dry-run and a hard memory threshold met on this machine right now (99%
// of memory must be available): the agent chooses victims, records WouldEvict
// Events and counts evictions_total{result="dry_run"}; the API server's audit
// log shows it wrote Events and nothing else (no eviction, no pod deletion, no
// node or node status patch). The /metrics page it serves in that state
// passes promtool and has every family docs/metrics.md lists: thresholds of
// every unit are configured (those but memory's far from met), so each
// threshold family of one unit is exposed.
func TestRunDryRunRecordsWouldEvictAndWritesNothingElse(t *testing.T) {
	const node, ns = "dryrun-node", "dryrun"
	since := time.Now().Add(-time.Second)
	pods := createPods(t, ns, node, 3)
	createNode(t, node)
	before, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, node, daemonOptions{evictionHard: "  memory.available: 99%\n  nodefs.inodesFree: 1%\n  pid.available: 1%\n  memory.pressure.some.avg300: 99%", dryRun: true})

	d.waitMetric(t, `evictiond_evictions_total{result="dry_run",signal="memory.available"}`,
		func(v float64) bool { return v >= 2 }, "at least two dry-run decisions", 30*time.Second)
	d.waitMetric(t, `evictiond_threshold_met{kind="hard",signal="memory.available"}`, eq(1), "met", time.Second)
	d.waitMetric(t, `evictiond_node_condition{condition="MemoryPressure"}`, eq(1), "reported", time.Second)

	uids := map[string]bool{}
	for _, p := range pods {
		uids[string(p.UID)] = true
	}
	would := waitEvents(t, ns, "WouldEvict", func(e corev1.Event) bool { return uids[string(e.InvolvedObject.UID)] }, 15*time.Second)
	if !strings.HasPrefix(would[0].Message, "Dry run: would evict.") || !strings.Contains(would[0].Message, "memory") {
		t.Errorf("WouldEvict message %q: want the dry-run prefix and the starved resource", would[0].Message)
	}
	waitEvents(t, "default", "EvictionThresholdMet", func(e corev1.Event) bool { return e.InvolvedObject.Name == node }, 10*time.Second)
	if !strings.Contains(d.log.String(), `"msg":"would evict pod"`) {
		t.Errorf("no \"would evict pod\" log line")
	}

	// Every pod is still there, with no deletion timestamp.
	for _, p := range pods {
		got, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil || got.UID != p.UID {
			t.Errorf("pod %s after dry run: err %v, deletionTimestamp %v", p.Name, err, got.GetDeletionTimestamp())
		}
	}
	after, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("node changed during the dry run: taints %v, conditions %v (before: %v, %v)",
			after.Spec.Taints, after.Status.Conditions, before.Spec.Taints, before.Status.Conditions)
	}

	t.Run("metrics pass promtool and list the documented families", func(t *testing.T) {
		checkMetricsPage(t, d)
	})

	d.stop(t)
	var events int
	for _, w := range agentWrites(t, since) {
		if w.ObjectRef.Resource == "events" && (w.Verb == "create" || w.Verb == "patch") {
			events++
			continue
		}
		t.Errorf("write in dry run: %s %s/%s %s/%s", w.Verb, w.ObjectRef.Resource, w.ObjectRef.Subresource, w.ObjectRef.Namespace, w.ObjectRef.Name)
	}
	if events == 0 {
		t.Errorf("the audit log shows no Event written by evictiond; the write count cannot be trusted")
	}
	t.Logf("dry run: %d Event writes by evictiond, no other write", events)
}

// TestRunReloadOutOfDryRunActsAndBackIntoDryRunStops switches dryRun in the
// file while a hard threshold is met: in dry run nothing but Events is
// written; once a file with dryRun: false is applied the agent writes its
// condition and taint and evicts through the Eviction API; once dryRun: true
// is back it releases its condition and taint once and evicts no more.
func TestRunReloadOutOfDryRunActsAndBackIntoDryRunStops(t *testing.T) {
	const node, ns = "switch-node", "switch"
	ctx := context.Background()
	pods := createPods(t, ns, node, 4)
	since := time.Now().Add(-time.Second)
	d := startDaemon(t, node, daemonOptions{evictionHard: "  memory.available: 99%", extra: []string{"dryRun: true"}})
	criEndpoint := regexp.MustCompile(`criEndpoint: (\S+)`).FindStringSubmatch(readFile(t, d.config.path()))[1]
	stateDir := filepath.Dir(regexp.MustCompile(`stateFile: (\S+)\}`).FindStringSubmatch(readFile(t, d.config.path()))[1])

	d.waitMetric(t, `evictiond_evictions_total{result="dry_run",signal="memory.available"}`,
		func(v float64) bool { return v >= 1 }, "a dry-run decision", 30*time.Second)
	for _, w := range agentWrites(t, since) {
		if w.ObjectRef.Resource != "events" {
			t.Fatalf("write while dryRun: true: %s %s/%s %s", w.Verb, w.ObjectRef.Resource, w.ObjectRef.Subresource, w.ObjectRef.Name)
		}
	}

	d.config.update(t, testConfig("  memory.available: 99%", criEndpoint, stateDir, "dryRun: false"))
	d.waitMetric(t, `evictiond_evictions_total{result="evicted",signal="memory.available"}`,
		func(v float64) bool { return v >= 1 }, "a real eviction after leaving dry run", 30*time.Second)
	waitNode(t, node, "evictiond's EvictiondMemoryPressure condition and the memory taint", func(n *corev1.Node) bool {
		c := findNodeCondition(n, kube.ConditionMemoryPressure)
		return c != nil && c.Status == corev1.ConditionTrue && hasTaint(n, "evictiond.io/memory-pressure")
	}, 15*time.Second)
	var evicted int
	for _, p := range pods {
		got, err := env.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			evicted++
		}
	}
	if evicted == 0 {
		t.Errorf("evictions_total{result=\"evicted\"} counts an eviction but every pod is still there undeleted")
	}
	var evictionCalls int
	for _, w := range agentWrites(t, since) {
		if w.ObjectRef.Resource == "pods" && w.ObjectRef.Subresource == "eviction" && w.Verb == "create" {
			evictionCalls++
		}
	}
	if evictionCalls == 0 {
		t.Errorf("the audit log shows no Eviction API call by evictiond")
	}

	// A reload to nodeStatus.conditions: standard hands the node to a writer with the
	// new settings: evictiond's own condition released, the standard entry held.
	d.config.update(t, testConfig("  memory.available: 99%", criEndpoint, stateDir, "dryRun: false", "nodeStatus: {conditions: standard}"))
	waitNode(t, node, "the standard MemoryPressure held and EvictiondMemoryPressure released after the reload", func(n *corev1.Node) bool {
		std, own := findNodeCondition(n, corev1.NodeMemoryPressure), findNodeCondition(n, kube.ConditionMemoryPressure)
		return std != nil && std.Status == corev1.ConditionTrue && std.Reason == kube.ReasonMemoryPressure &&
			own != nil && own.Status == corev1.ConditionFalse && hasTaint(n, "evictiond.io/memory-pressure")
	}, 15*time.Second)

	d.config.update(t, testConfig("  memory.available: 99%", criEndpoint, stateDir, "dryRun: true"))
	waitNode(t, node, "the conditions released and the taint removed after dryRun: true", func(n *corev1.Node) bool {
		std, own := findNodeCondition(n, corev1.NodeMemoryPressure), findNodeCondition(n, kube.ConditionMemoryPressure)
		return (std == nil || std.Status == corev1.ConditionFalse) && (own == nil || own.Status == corev1.ConditionFalse) &&
			!hasTaint(n, "evictiond.io/memory-pressure")
	}, 15*time.Second)
	d.waitMetric(t, `evictiond_config_reloads_total{result="success"}`, eq(3), "three reloads", 5*time.Second)
	settled := time.Now()
	time.Sleep(3 * time.Second)
	for _, w := range agentWrites(t, settled) {
		if w.ObjectRef.Resource != "events" {
			t.Errorf("write after returning to dry run: %s %s/%s %s", w.Verb, w.ObjectRef.Resource, w.ObjectRef.Subresource, w.ObjectRef.Name)
		}
	}
}

func waitNode(t *testing.T, name, what string, ok func(*corev1.Node) bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var n *corev1.Node
	var err error
	for time.Now().Before(deadline) {
		if n, err = env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); err == nil && ok(n) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	t.Fatalf("node %s: want %s within %v; conditions %+v, taints %v", name, what, timeout, n.Status.Conditions, n.Spec.Taints)
}

func findNodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

// checkMetricsPage runs `promtool check metrics` on /metrics and checks that
// every metric family docs/metrics.md lists is exposed.
func checkMetricsPage(t *testing.T, d *runningDaemon) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian package prometheus (make test-daemon does, or hack/install-deps.sh prometheus)")
	}
	code, body := httpGet(d.url + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	families := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			families[strings.Fields(rest)[0]] = true
		}
	}
	documented := documentedFamilies(t)
	// Counters and histograms with labels exist from their first observation: these
	// only count rare events (a failed reading, disk reclaim, the brake) that this test
	// does not cause.
	onFirstEvent := map[string]bool{"evictiond_observation_errors_total": true, "evictiond_reclaim_bytes_total": true, "evictiond_reclaim_runs_total": true,
		"evictiond_notifier_fallback_total": true, "evictiond_notifier_wakes_total": true, "evictiond_notifier_armed": true,
		// The brake's, from its first action.
		"evictiond_brake_total": true, "evictiond_brake_crossing_to_frozen_seconds": true, "evictiond_brake_crossing_to_freed_seconds": true,
		// Reclaim before evict's (off by default), from its first request.
		"evictiond_memory_reclaim_bytes_total": true, "evictiond_memory_reclaim_requests_total": true, "evictiond_memory_reclaim_evictions_avoided_total": true,
		// Eviction loops', by workload kind, from the first loop.
		"evictiond_eviction_loop_evictions_total": true, "evictiond_eviction_loop_workloads": true,
		// Livelock restarts' (livelock.restart, off by default), by action and outcome, from the first.
		"evictiond_pod_memory_livelock_restarts_total": true}
	for _, name := range documented {
		if !families[name] && !onFirstEvent[name] {
			t.Errorf("metric family %s is documented in docs/metrics.md but not exposed", name)
		}
	}
	for _, prefix := range []string{"evictiond_notifier_", "evictiond_monitor_", "process_", "go_"} {
		found := false
		for f := range families {
			found = found || strings.HasPrefix(f, prefix)
		}
		if !found {
			t.Errorf("no %s* metric family exposed (docs/metrics.md lists them)", prefix)
		}
	}
	for f := range families {
		if strings.HasPrefix(f, "evictiond_") && !documentedPrefix(f, documented) {
			t.Errorf("metric family %s is exposed but not documented in docs/metrics.md", f)
		}
	}
	if len(documented) < 10 {
		t.Fatalf("docs/metrics.md lists only %d metric families; the table was not parsed", len(documented))
	}
}

func documentedPrefix(family string, documented []string) bool {
	for _, d := range documented {
		if family == d {
			return true
		}
	}
	return strings.HasPrefix(family, "evictiond_notifier_") || strings.HasPrefix(family, "evictiond_monitor_")
}

// documentedFamilies reads the metric names of docs/metrics.md's table.
func documentedFamilies(t *testing.T) []string {
	data := readFile(t, filepath.Join("..", "..", "docs", "metrics.md"))
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(evictiond_[a-z_]+)` \\|").FindAllStringSubmatch(data, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestRunReadyzFollowsAPIServerAndCRI proves /readyz: 200 when all is well,
// 503 naming "apiserver" while the API server is down, 503 naming "cri"
// while containerd is down, 200 again when each is back.
func TestRunReadyzFollowsAPIServerAndCRI(t *testing.T) {
	ctrd := containerd.Start(t, containerd.Options{})
	d := startDaemon(t, "readyz-node", daemonOptions{evictionHard: "  memory.available: 100Mi", ctrd: ctrd})
	d.waitReadyz(t, http.StatusOK, "ok", 5*time.Second)

	// Probed like the kubelet would (faster), a quiet agent with its watches
	// open costs the API server nothing: past the 30 s after its last request,
	// it still does not ask the API server's /readyz.
	quiet := time.Now()
	for time.Since(quiet) < 40*time.Second {
		if code, body := httpGet(d.url + "/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz while all is well: %d\n%s", code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if n := countAgentRequests(t, quiet, "/readyz"); n != 0 {
		t.Errorf("the agent asked the API server's /readyz %d times in 40 s with its watches open; want 0", n)
	}

	env.StopAPIServer()
	apiBack := false
	t.Cleanup(func() {
		if !apiBack {
			if err := env.StartAPIServer(); err != nil {
				t.Errorf("restarting the API server: %v", err)
			}
		}
	})
	down := time.Now()
	body := d.waitReadyz(t, http.StatusServiceUnavailable, "failed: apiserver", 30*time.Second)
	t.Logf("API server down: /readyz 503 after %v:\n%s", time.Since(down).Round(time.Millisecond), body)
	if err := env.StartAPIServer(); err != nil {
		t.Fatalf("restarting the API server: %v", err)
	}
	apiBack = true
	up := time.Now()
	d.waitReadyz(t, http.StatusOK, "ok", 60*time.Second)
	t.Logf("API server back: /readyz 200 after %v", time.Since(up).Round(time.Millisecond))

	ctrd.Kill()
	down = time.Now()
	body = d.waitReadyz(t, http.StatusServiceUnavailable, "failed: cri", 30*time.Second)
	t.Logf("containerd down: /readyz 503 after %v:\n%s", time.Since(down).Round(time.Millisecond), body)
	ctrd.Restart(t)
	up = time.Now()
	d.waitReadyz(t, http.StatusOK, "ok", 60*time.Second)
	t.Logf("containerd back: /readyz 200 after %v", time.Since(up).Round(time.Millisecond))
}

// TestRunServesProbesWhileAPIServerDownAtStart starts the agent while the
// API server is down (a node rebooting with its control plane): /healthz is
// 200 and /readyz 503 naming the start-up step at once, so the kubelet does
// not restart it in a loop; once the API server is back it becomes ready.
func TestRunServesProbesWhileAPIServerDownAtStart(t *testing.T) {
	const node = "coldstart-node"
	createNode(t, node)
	ctrd := containerd.Start(t, containerd.Options{})
	env.StopAPIServer()
	apiBack := false
	t.Cleanup(func() {
		if !apiBack {
			if err := env.StartAPIServer(); err != nil {
				t.Errorf("restarting the API server: %v", err)
			}
		}
	})
	d := startDaemon(t, node, daemonOptions{evictionHard: "  memory.available: 100Mi", ctrd: ctrd, noWait: true})
	d.waitReadyz(t, http.StatusServiceUnavailable, "startup: starting: waiting for the pod and node informers", 15*time.Second)
	time.Sleep(2 * time.Second)
	if code, body := httpGet(d.url + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz during start-up: %d %s, want 200", code, body)
	}
	if code, _ := httpGet(d.url + "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics during start-up: %d, want 200", code)
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatalf("restarting the API server: %v", err)
	}
	apiBack = true
	d.waitReady(t, 60*time.Second)
}

// TestRunStopsCleanlyDuringStartUp cancels the agent while it waits for an
// unreachable API server: runDaemon returns nil at once.
func TestRunStopsCleanlyDuringStartUp(t *testing.T) {
	const node = "cancel-start-node"
	createNode(t, node)
	ctrd := containerd.Start(t, containerd.Options{})
	env.StopAPIServer()
	defer func() {
		if err := env.StartAPIServer(); err != nil {
			t.Errorf("restarting the API server: %v", err)
		}
	}()
	d := startDaemon(t, node, daemonOptions{evictionHard: "  memory.available: 100Mi", ctrd: ctrd, noWait: true})
	d.waitReadyz(t, http.StatusServiceUnavailable, "startup", 15*time.Second)
	if took := d.stop(t); took > 5*time.Second {
		t.Errorf("stop during start-up took %v", took)
	}
}

// TestRunStopsPromptlyWhileAPIServerDown stops an agent that keeps deciding
// (dry run under a met threshold, so Events queue up) while the API server
// is unreachable: pending Event writes and watch retries must not hold the
// shutdown past the DaemonSet's terminationGracePeriodSeconds (10 s).
func TestRunStopsPromptlyWhileAPIServerDown(t *testing.T) {
	const node, ns = "stopdown-node", "stopdown"
	createPods(t, ns, node, 2)
	d := startDaemon(t, node, daemonOptions{evictionHard: "  memory.available: 99%", dryRun: true})
	d.waitMetric(t, `evictiond_evictions_total{result="dry_run",signal="memory.available"}`,
		func(v float64) bool { return v >= 1 }, "a dry-run decision", 30*time.Second)
	env.StopAPIServer()
	defer func() {
		if err := env.StartAPIServer(); err != nil {
			t.Errorf("restarting the API server: %v", err)
		}
	}()
	// Decisions go on (the loop reads the informer cache) and their Events fail.
	before, _ := d.metricValue(t, `evictiond_evictions_total{result="dry_run",signal="memory.available"}`)
	d.waitMetric(t, `evictiond_evictions_total{result="dry_run",signal="memory.available"}`,
		func(v float64) bool { return v > before }, "decisions while the API server is down", 30*time.Second)
	took := d.stop(t)
	t.Logf("stopped %v after cancel with the API server down", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("shutdown took %v with the API server down, want under 5s", took)
	}
}

// TestRunStopsPodThroughCRIWhileAPIServerDownAndReportsItWhenBack proves
// the eviction ladder's last step through the whole daemon: with
// eviction.apiUnreachable.criStop, a hard threshold met while the API server
// is down stops the chosen pod's sandbox in the real containerd; once the API
// server is back the agent reports it (PodStoppedLocally Events, pod deleted).
func TestRunStopsPodThroughCRIWhileAPIServerDownAndReportsItWhenBack(t *testing.T) {
	const node, ns = "localstop-node", "localstop"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 256 << 20})
	if _, err := ctrd.ImportSandboxImage(ctx); err != nil {
		t.Fatal(err)
	}
	logger := klog.Background()
	rt, err := criclient.NewRemoteRuntimeService(ctrd.Endpoint, 30*time.Second, nil, &logger)
	if err != nil {
		t.Fatalf("CRI runtime client: %v", err)
	}
	pods := createPods(t, ns, node, 2)
	sandboxes := map[types.UID]string{}
	for _, p := range pods {
		id, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: ns, Uid: string(p.UID)},
			Labels:   map[string]string{"io.kubernetes.pod.uid": string(p.UID), "io.kubernetes.pod.name": p.Name, "io.kubernetes.pod.namespace": ns},
			Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: ctrd.CgroupParent, SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
		}, "")
		if err != nil {
			t.Fatalf("RunPodSandbox %s: %v\n--- containerd log ---\n%s", p.Name, err, ctrd.LogTail(30))
		}
		sandboxes[p.UID] = id
	}
	stopped := func() []*corev1.Pod {
		var out []*corev1.Pod
		for _, p := range pods {
			st, err := rt.PodSandboxStatus(ctx, sandboxes[p.UID], false)
			if err != nil {
				t.Fatalf("PodSandboxStatus %s: %v", p.Name, err)
			}
			if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				out = append(out, p)
			}
		}
		return out
	}

	localStop := "eviction: {apiUnreachable: {criStop: true, after: 2s}}"
	d := startDaemon(t, node, daemonOptions{evictionHard: "  memory.available: 100Mi", extra: []string{localStop}, ctrd: ctrd})
	criEndpoint := regexp.MustCompile(`criEndpoint: (\S+)`).FindStringSubmatch(readFile(t, d.config.path()))[1]
	stateDir := filepath.Dir(regexp.MustCompile(`stateFile: (\S+)\}`).FindStringSubmatch(readFile(t, d.config.path()))[1])

	env.StopAPIServer()
	apiBack := false
	t.Cleanup(func() {
		if !apiBack {
			_ = env.StartAPIServer()
		}
	})
	// Pressure arrives while the API server is down (the reload needs no API).
	d.config.update(t, testConfig("  memory.available: 99%", criEndpoint, stateDir, localStop))
	d.waitMetric(t, `evictiond_evictions_total{result="stopped_locally",signal="memory.available"}`,
		func(v float64) bool { return v >= 1 }, "a pod stopped through the CRI", 60*time.Second)
	// Pressure ends before the API server is back, so what follows is the report alone.
	d.config.update(t, testConfig("  memory.available: 100Mi", criEndpoint, stateDir, localStop))
	d.waitMetric(t, `evictiond_threshold_met{kind="hard",signal="memory.available"}`, eq(0), "not met any more", 15*time.Second)
	victims := stopped()
	if len(victims) == 0 {
		t.Fatalf("evictions_total counts a local stop but every sandbox is still ready")
	}
	t.Logf("stopped through the CRI while the API server was down: %d of %d pods", len(victims), len(pods))

	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	apiBack = true
	for _, v := range victims {
		ev := waitEvents(t, ns, "PodStoppedLocally", func(e corev1.Event) bool { return e.InvolvedObject.UID == v.UID }, 60*time.Second)
		if !strings.Contains(ev[0].Message, "Stopped through the CRI") || ev[0].Type != corev1.EventTypeWarning {
			t.Errorf("PodStoppedLocally Event %s %q", ev[0].Type, ev[0].Message)
		}
		got, err := env.Client.CoreV1().Pods(ns).Get(ctx, v.Name, metav1.GetOptions{})
		if err == nil && got.DeletionTimestamp == nil {
			t.Errorf("pod %s stopped locally was not deleted once the API server was back", v.Name)
		}
	}
	waitEvents(t, "default", "PodStoppedLocally", func(e corev1.Event) bool { return e.InvolvedObject.Name == node }, 10*time.Second)
}

// TestDeployManifestsAcceptedByAPIServer runs `kubectl apply --dry-run=server
// -k deploy/` against the real API server: every object of the kustomization
// passes the server's validation and admission (the namespace is created
// first because a server-side dry run persists nothing, so namespaced objects
// would find no namespace).
func TestDeployManifestsAcceptedByAPIServer(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl not found in PATH: install it (Debian package kubernetes-client)")
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evictiond-system"}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace evictiond-system: %v", err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", env.KubeconfigPath, "apply", "--dry-run=server",
		"-k", filepath.Join("..", "..", "deploy")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k deploy/: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	for _, kind := range []string{"daemonset.apps/evictiond", "configmap/evictiond-config", "serviceaccount/evictiond",
		"clusterrole.rbac.authorization.k8s.io/", "validatingadmissionpolicy.admissionregistration.k8s.io/"} {
		if !bytes.Contains(out, []byte(kind)) {
			t.Errorf("kubectl output does not name %s", kind)
		}
	}
}

// TestRunBinaryStopsOnSIGTERM runs evictiond as a process and sends it a
// real SIGTERM: it exits 0 within a few seconds with "evictiond stopped".
func TestRunBinaryStopsOnSIGTERM(t *testing.T) {
	const node = "sigterm-node"
	createNode(t, node)
	ctrd := containerd.Start(t, containerd.Options{})
	cm := newConfigMapDir(t, testConfig("  memory.available: 100Mi", ctrd.Endpoint, t.TempDir()))
	addr := freeAddress(t)
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "run", "--config", cm.path(), "--kubeconfig", env.KubeconfigPath, "--node-name", node,
		"--metrics-address", addr, "--health-address", addr, "--metrics-secure=false", "--kubelet-root-dir", t.TempDir(), "--pod-logs-dir", t.TempDir(),
		"--image-fs-dir", t.TempDir(), "--cgroup-root", makeCgroupRoot(t))
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	d := &runningDaemon{url: "http://" + addr, log: logs, done: exited}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("evictiond log:\n%s", logs.String())
		}
	})
	d.waitReady(t, 90*time.Second)
	time.Sleep(2 * time.Second) // a few passes, a notifier armed, watches open

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		took := time.Since(start)
		if err != nil {
			t.Fatalf("evictiond exited with %v after SIGTERM", err)
		}
		if took > 5*time.Second {
			t.Errorf("evictiond took %v to stop after SIGTERM, want under 5s", took)
		}
		t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("evictiond still running 15s after SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"evictiond stopped"`) {
		t.Errorf("no \"evictiond stopped\" log line")
	}
}

// BenchmarkIdleAgent runs evictiond as a process (bin/evictiond from
// $EVICTIOND_BIN, else this test binary acting as it) with the shipped
// configuration on a node without pressure, and reports its resident memory
// and CPU over 60 s of idling (1 s loop, 10 s housekeeping, watches open,
// /metrics scraped every 15 s):
// on a node without pods, and on one with 110 (the kubelet's default maxPods:
// BestEffort pods bound to the node in the API server, each with its pod
// cgroup; no kubelet runs them). make bench-footprint measures the same on the
// e2e cluster, next to the kubelet and node_exporter.
func BenchmarkIdleAgent(b *testing.B) {
	b.Run("pods=0", func(b *testing.B) { benchIdleAgent(b, "idle-node", 0) })
	b.Run("pods=110", func(b *testing.B) { benchIdleAgent(b, "idle-node-110", 110) })
}

func benchIdleAgent(b *testing.B, node string, pods int) {
	createNode(b, node)
	ctrd := containerd.Start(b, containerd.Options{})
	shipped := shippedConfig(b)
	stateDir := b.TempDir()
	// The shipped configuration names no socket (the agent detects it): the test's runtime is named.
	shipped = strings.Replace(shipped, "\nreclaim:\n", "\nreclaim:\n  criEndpoint: "+ctrd.Endpoint+"\n", 1)
	if !strings.Contains(shipped, ctrd.Endpoint) {
		b.Fatal("the shipped configuration has no reclaim section to name the test's runtime in")
	}
	shipped = strings.Replace(shipped, "stateFile: /var/lib/evictiond/images.json", "stateFile: "+filepath.Join(stateDir, "images.json"), 1)
	// The node's filesystems are this machine's disk, shared with other work: its free space
	// must not make the idle agent reclaim and evict (the shipped 12–20 % thresholds did, on a
	// disk 9.5 % free). The filesystem thresholds are 1 % here, the rest is as shipped.
	if len(fsThreshold.FindAllString(shipped, -1)) < 4 {
		b.Fatal("the shipped configuration has no percentage thresholds of nodefs and imagefs to lower")
	}
	shipped = fsThreshold.ReplaceAllString(shipped, "${1}1%")
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(shipped), 0o644); err != nil {
		b.Fatal(err)
	}
	cgroupRoot := makeCgroupRoot(b)
	if pods > 0 {
		makePodCgroups(b, cgroupRoot, createPods(b, node, node, pods))
	}
	addr := freeAddress(b)
	bin, extraEnv := os.Getenv("EVICTIOND_BIN"), runMainEnv+"=0"
	if bin == "" {
		bin, extraEnv = os.Args[0], runMainEnv+"=1"
	}
	logs := &syncBuffer{}
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--kubeconfig", env.KubeconfigPath, "--node-name", node,
		"--metrics-address", addr, "--health-address", addr, "--metrics-secure=false", "--kubelet-root-dir", b.TempDir(), "--pod-logs-dir", b.TempDir(),
		"--image-fs-dir", b.TempDir(), "--cgroup-root", cgroupRoot)
	cmd.Env = append(os.Environ(), extraEnv)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		if code, _ := httpGet("http://" + addr + "/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not ready within 90s; log:\n%s", logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // past start-up: first housekeeping, informers synced
	pid := cmd.Process.Pid
	b.ResetTimer()
	for range b.N {
		cpu0, at0 := procCPUTicks(b, pid), time.Now()
		var maxRSS int64
		lastScrape := time.Time{}
		for time.Since(at0) < 60*time.Second {
			// Scraped every 15 s as Prometheus would (gzip accepted: Go's client asks for it).
			if time.Since(lastScrape) >= 15*time.Second {
				if code, body := httpGet("http://" + addr + "/metrics"); code != http.StatusOK {
					b.Fatalf("scraping /metrics: %d %s", code, body)
				}
				lastScrape = time.Now()
			}
			maxRSS = max(maxRSS, procRSSKiB(b, pid))
			time.Sleep(time.Second)
		}
		cpuSeconds := float64(procCPUTicks(b, pid)-cpu0) / 100 // USER_HZ is 100 on Linux
		elapsed := time.Since(at0).Seconds()
		b.ReportMetric(float64(procRSSKiB(b, pid))/1024, "rss-MiB")
		b.ReportMetric(float64(maxRSS)/1024, "max-rss-MiB")
		b.ReportMetric(100*cpuSeconds/elapsed, "cpu-%")
		reportIdleMemory(b, pid, "http://"+addr+"/metrics")
	}
	if code, body := httpGet("http://" + addr + "/readyz"); code != http.StatusOK {
		b.Errorf("agent not ready after idling: %d %s", code, body)
	}
}

// reportIdleMemory reports what the idle agent's resident memory is made of: anonymous and
// file-backed (the binary's pages) from /proc/<pid>/smaps_rollup; the Go heap in use, the heap
// held but neither in use nor returned, the stacks and the goroutines from its /metrics (the Go
// collector).
func reportIdleMemory(b *testing.B, pid int, metricsURL string) {
	b.Helper()
	kib, err := proc.SmapsRollupKiB(pid)
	if err != nil {
		b.Fatal(err)
	}
	code, text := httpGet(metricsURL)
	if code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", metricsURL, code, text)
	}
	v := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "go_") {
			v[name], _ = strconv.ParseFloat(strings.TrimSpace(value), 64)
		}
	}
	const mib = 1 << 20
	b.ReportMetric(kib["Anonymous"]/1024, "anon-MiB")
	b.ReportMetric((kib["Rss"]-kib["Anonymous"])/1024, "file-MiB")
	b.ReportMetric(v["go_memstats_heap_inuse_bytes"]/mib, "heap-inuse-MiB")
	b.ReportMetric((v["go_memstats_heap_idle_bytes"]-v["go_memstats_heap_released_bytes"])/mib, "heap-kept-MiB")
	b.ReportMetric(v["go_memstats_stack_inuse_bytes"]/mib, "stacks-MiB")
	b.ReportMetric(v["go_goroutines"], "goroutines")
}

// fsThreshold is a percentage threshold of a filesystem signal in a configuration.
var fsThreshold = regexp.MustCompile(`(?m)^(\s+(?:nodefs|imagefs)\.(?:available|inodesFree): )\d+%$`)

func procCPUTicks(b *testing.B, pid int) int64 {
	ticks, err := proc.CPUTicks(pid)
	if err != nil {
		b.Fatal(err)
	}
	return ticks
}

func procRSSKiB(b *testing.B, pid int) int64 {
	rss, err := proc.RSSBytes(pid)
	if err != nil {
		b.Fatal(err)
	}
	return rss >> 10
}

// shippedConfig is config.yaml of deploy/configmap.yaml.
func shippedConfig(tb testing.TB) string {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "configmap.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "config.yaml: |\n")
	if !ok {
		tb.Fatal("deploy/configmap.yaml has no config.yaml block")
	}
	var out []string
	for _, line := range strings.Split(block, "\n") {
		out = append(out, strings.TrimPrefix(line, "    "))
	}
	return strings.Join(out, "\n")
}
