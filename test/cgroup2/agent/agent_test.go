//go:build integration && cgroup2

package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/evictiond/evictiond/internal/kube"
)

const (
	childEnv    = "EVICTIOND_AGENT_TEST_CHILD"
	cgroupMount = "/sys/fs/cgroup"
	namespace   = "v2-agent"
	mib         = int64(1) << 20
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

var sink [][]byte

// runChild is a pod's process, on command (one per line, "ok" after each):
//
//	ramp MIB RATE   touch MIB MiB of new memory at about RATE MiB/s
//	threads N       start N more threads, each parked in a blocking read
func runChild(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	block, _, _ := os.Pipe()
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "ramp":
			total, _ := strconv.Atoi(f[1])
			rate, _ := strconv.Atoi(f[2])
			start := time.Now()
			for i := 1; i <= total; i++ {
				b := make([]byte, 1<<20)
				for j := 0; j < len(b); j += 4096 {
					b[j] = 1
				}
				sink = append(sink, b)
				if ahead := time.Duration(float64(i)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		case len(f) == 2 && f[0] == "threads":
			n, _ := strconv.Atoi(f[1])
			for range n {
				go func() {
					runtime.LockOSThread()
					var buf [1]byte
					_, _ = syscall.Read(int(block.Fd()), buf[:])
				}()
			}
		}
		fmt.Fprintln(out, "ok")
	}
	return 0
}

// cluster is the API server the host runs.
type cluster struct {
	client     kubernetes.Interface
	kubeconfig string
}

func connect(t *testing.T) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests create cgroups and must run as root (make test-cgroup2 runs them in a VM)")
	}
	path := os.Getenv(KubeconfigEnv)
	if path == "" {
		t.Fatalf("%s is not set: this test runs inside the cgroup v2 VM of test/cgroup2, which passes the host's API server", KubeconfigEnv)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s on the host's API server: %v", namespace, err)
	}
	return &cluster{client: client, kubeconfig: path}
}

// node is one Node object, evictiond running for it, kubepods for its pods
// and the kubelet stand-in.
type node struct {
	t       *testing.T
	c       *cluster
	name    string
	metrics string
	logPath string
	agent   *exec.Cmd
	exited  chan struct{}

	mu   sync.Mutex
	pods map[types.UID]*pod
	// evicted: pods whose deletion the stand-in carried out, with the time
	// the deletion (eviction) was first seen.
	evicted map[string]time.Time
}

type pod struct {
	name   string
	uid    types.UID
	cgroup string // e.g. /kubepods/burstable/pod<uid>
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
}

// nodeOptions: the configuration's threshold lines and the kubepods limit.
type nodeOptions struct {
	config        string // evictionHard etc.: YAML lines at the top level
	kubepodsLimit int64
}

func startNode(t *testing.T, c *cluster, name string, o nodeOptions) *node {
	t.Helper()
	ctx := context.Background()
	n := &node{t: t, c: c, name: name, pods: map[types.UID]*pod{}, evicted: map[string]time.Time{}, exited: make(chan struct{})}
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	created, err := c.client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	capacity := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourcePods: resource.MustParse("110")}
	created.Status.Capacity, created.Status.Allocatable = capacity, capacity
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting node %s status: %v", name, err)
	}
	t.Cleanup(func() { _ = c.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })

	// kubepods as the kubelet's cgroupfs driver lays it out, limited to the
	// node's allocatable memory (enforceNodeAllocatable: [pods]).
	for _, cg := range []string{"/kubepods", "/kubepods/burstable", "/kubepods/besteffort"} {
		mkCgroup(t, cg, true)
	}
	if o.kubepodsLimit > 0 {
		writeFile(t, filepath.Join(cgroupMount, "kubepods", "memory.max"), strconv.FormatInt(o.kubepodsLimit, 10))
	}
	t.Cleanup(func() {
		for _, cg := range []string{"/kubepods/burstable", "/kubepods/besteffort", "/kubepods"} {
			rmCgroup(t, cg)
		}
	})

	dir := t.TempDir()
	for _, d := range []string{"kubelet", "pods", "images", "state"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
%s
evictionPressureTransitionPeriod: 5s
loop: {interval: 1s, podCleanupTimeout: 30s}
notifier:
  psi: {enabled: true, stall: 50ms, window: 500ms}
reclaim:
  criEndpoint: unix:///run/no-runtime-in-this-vm.sock
  containerGC: false
  podLogs: false
  imageGC: {enabled: false, stateFile: %s}
`, o.config, filepath.Join(dir, "state", "images.json"))
	cfgPath := filepath.Join(dir, "config.yaml")
	writeFile(t, cfgPath, config)
	n.metrics = freeAddress(t)
	n.logPath = filepath.Join(dir, "evictiond.log")
	logFile, err := os.Create(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv(BinaryEnv)
	if bin == "" {
		t.Fatalf("%s is not set: the host test puts the evictiond binary into the VM", BinaryEnv)
	}
	n.agent = exec.Command(bin, "run", "--config", cfgPath, "--kubeconfig", c.kubeconfig, "--node-name", name,
		"--metrics-address", n.metrics, "--health-address", n.metrics, "--metrics-secure=false", "--kubelet-root-dir", filepath.Join(dir, "kubelet"),
		"--pod-logs-dir", filepath.Join(dir, "pods"), "--image-fs-dir", filepath.Join(dir, "images"),
		"--cgroup-driver", "cgroupfs")
	n.agent.Stdout, n.agent.Stderr = logFile, logFile
	if err := n.agent.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() { _ = n.agent.Wait(); logFile.Close(); close(n.exited) }()
	t.Cleanup(func() {
		_ = n.agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("evictiond did not stop within 20s of SIGTERM")
			_ = n.agent.Process.Kill()
			<-n.exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(n.logPath)
			t.Logf("evictiond log:\n%s", lastLines(string(log), 80))
		}
	})
	n.waitHealthy(t, 120*time.Second)

	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.kubeletStandIn(watchCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, p := range n.pods {
			n.killPod(p)
		}
	})
	return n
}

func (n *node) waitHealthy(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			log, _ := os.ReadFile(n.logPath)
			t.Fatalf("evictiond exited while starting:\n%s", lastLines(string(log), 60))
		default:
		}
		if resp, err := http.Get("http://" + n.metrics + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	log, _ := os.ReadFile(n.logPath)
	t.Fatalf("evictiond not healthy within %v:\n%s", timeout, lastLines(string(log), 60))
}

// kubeletStandIn does the kubelet's bookkeeping for this node's pods: a pod
// being deleted (accepted eviction) has its processes killed and cgroups
// removed, then its object deleted.
func (n *node) kubeletStandIn(ctx context.Context) {
	sel := fields.OneTermEqualSelector("spec.nodeName", n.name).String()
	for ctx.Err() == nil {
		w, err := n.c.client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.DeletionTimestamp == nil {
				continue
			}
			n.mu.Lock()
			if _, seen := n.evicted[p.Name]; !seen {
				n.evicted[p.Name] = time.Now()
				if running := n.pods[p.UID]; running != nil {
					n.killPod(running)
					delete(n.pods, p.UID)
				}
				zero := int64(0)
				_ = n.c.client.CoreV1().Pods(namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
			n.mu.Unlock()
		}
		w.Stop()
	}
}

// killPod ends a pod's processes with cgroup.kill and removes its cgroups.
func (n *node) killPod(p *pod) {
	dir := filepath.Join(cgroupMount, p.cgroup)
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	_ = p.in.Close()
	_ = p.cmd.Process.Kill()
	_, _ = p.cmd.Process.Wait()
	for range 100 {
		if os.Remove(filepath.Join(dir, "ctr")) == nil || os.IsNotExist(os.Remove(filepath.Join(dir, "ctr"))) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 100 {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startPod creates a running pod: the object (bound to the node, status
// Running as the kubelet would report it) and one process in its cgroup.
func (n *node) startPod(name string, requests corev1.ResourceList) *pod {
	t := n.t
	t.Helper()
	ctx := context.Background()
	name = n.name + "-" + name // one namespace for every scenario's node
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: requests}}}}}
	created, err := n.c.client.CoreV1().Pods(namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = n.c.client.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	now := metav1.Now()
	created.Status.Phase = corev1.PodRunning
	created.Status.StartTime = &now
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	created.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Ready: true, Image: "busybox",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	running, err := n.c.client.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("setting pod %s running: %v", name, err)
	}
	tier := ""
	switch running.Status.QOSClass {
	case corev1.PodQOSBurstable:
		tier = "/burstable"
	case corev1.PodQOSBestEffort:
		tier = "/besteffort"
	}
	p := &pod{name: name, uid: running.UID, cgroup: "/kubepods" + tier + "/pod" + string(running.UID)}
	mkCgroup(t, p.cgroup, true)
	mkCgroup(t, p.cgroup+"/ctr", false)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(self)
	p.cmd.Env = append(os.Environ(), childEnv+"=1")
	p.cmd.Stderr = os.Stderr
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(stdout)
	// Into the container cgroup before it runs anything: a clone into the
	// cgroup (CLONE_INTO_CGROUP) as runc does.
	cg, err := os.Open(filepath.Join(cgroupMount, p.cgroup, "ctr"))
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	p.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting pod %s's process: %v", name, err)
	}
	n.mu.Lock()
	n.pods[p.uid] = p
	n.mu.Unlock()
	return p
}

// send gives the pod's process a command; reply waits for its "ok".
func (p *pod) send(format string, args ...any) {
	_, _ = fmt.Fprintf(p.in, format+"\n", args...)
}

func (p *pod) reply(t *testing.T, timeout time.Duration) {
	t.Helper()
	got := make(chan error, 1)
	go func() { _, err := p.out.ReadString('\n'); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("pod %s's process: %v", p.name, err)
		}
	case <-time.After(timeout):
		t.Fatalf("pod %s's process did not answer within %v", p.name, timeout)
	}
}

func (n *node) evictedAt(name string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := n.evicted[name]
	return at, ok
}

func (n *node) waitEvicted(t *testing.T, name string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if at, ok := n.evictedAt(name); ok {
			return at
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(n.logPath)
	t.Fatalf("pod %s not evicted within %v; evictiond log:\n%s", name, timeout, lastLines(string(log), 60))
	return time.Time{}
}

// waitCondition waits for the node's condition (and evictiond's taint for
// it) to be set (status True, taint present) or cleared.
func (n *node) waitCondition(t *testing.T, cond corev1.NodeConditionType, taint string, set bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		obj, err := n.c.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err == nil {
			status, tainted := corev1.ConditionUnknown, false
			for _, c := range obj.Status.Conditions {
				if c.Type == cond {
					status = c.Status
				}
			}
			for _, tn := range obj.Spec.Taints {
				tainted = tainted || tn.Key == taint
			}
			last = fmt.Sprintf("%s=%s, taint %s present=%v", cond, status, taint, tainted)
			if set && status == corev1.ConditionTrue && tainted || !set && status != corev1.ConditionTrue && !tainted {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %s: want %s set=%v within %v; last: %s", n.name, cond, set, timeout, last)
}

// A pod ramps its memory toward the kubepods limit: evictiond evicts it
// before the kernel's OOM killer is reached, bystanders keep running, the
// node gets MemoryPressure and evictiond's taint, both cleared once the
// pressure is over (after the 5 s transition period).
func TestCgroup2AgentMemoryRampEvictedBeforeKubepodsLimit(t *testing.T) {
	c := connect(t)
	const limit = 512 * mib
	n := startNode(t, c, "v2-memory", nodeOptions{config: "evictionHard: {memory.available: 100Mi}", kubepodsLimit: limit})
	small := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	bystanders := []*pod{n.startPod("bystander-a", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")}), n.startPod("bystander-b", nil)}
	for _, b := range bystanders {
		b.send("ramp 40 100")
		b.reply(t, 30*time.Second)
	}
	hog := n.startPod("hog", small)
	time.Sleep(2 * time.Second) // a few passes with everything calm
	if _, ok := n.evictedAt(hog.name); ok {
		t.Fatal("hog evicted before it allocated anything")
	}
	// The allocatable threshold (100Mi below the 512Mi limit) is crossed at
	// about 412Mi of kubepods working set. The hog takes 280Mi quickly (about
	// 370Mi in kubepods with the bystanders), then ramps at 20 MiB/s toward
	// 600Mi, beyond the limit: from the crossing evictiond has about 5 s
	// (100Mi at 20 MiB/s) before the kernel's OOM killer would act.
	hog.send("ramp 280 200")
	hog.reply(t, 60*time.Second)
	start := time.Now()
	hog.send("ramp 320 20")
	events := filepath.Join(cgroupMount, "kubepods", "memory.events")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if at, ok := n.evictedAt(hog.name); ok {
			t.Logf("hog evicted %v after its slow ramp started", at.Sub(start).Round(time.Millisecond))
			break
		}
		if raw, err := os.ReadFile(events); err != nil || !strings.Contains(string(raw), "oom_kill 0") {
			log, _ := os.ReadFile(n.logPath)
			t.Fatalf("the kernel's OOM killer ran in kubepods before evictiond evicted the hog (%v); kubepods memory.events:\n%s\nevictiond log:\n%s", err, raw, lastLines(string(log), 60))
		}
		if time.Now().After(deadline) {
			n.waitEvicted(t, hog.name, 0) // fails with the log
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.waitCondition(t, kube.ConditionMemoryPressure, kube.TaintKeyMemoryPressure, true, 20*time.Second)
	for _, b := range bystanders {
		if _, ok := n.evictedAt(b.name); ok {
			t.Errorf("bystander %s was evicted", b.name)
		}
		if _, err := c.client.CoreV1().Pods(namespace).Get(context.Background(), b.name, metav1.GetOptions{}); err != nil {
			t.Errorf("bystander %s: %v", b.name, err)
		}
	}
	n.waitCondition(t, kube.ConditionMemoryPressure, kube.TaintKeyMemoryPressure, false, 60*time.Second)
}

// A pod throttled at its own memory.high stalls on memory: the kubepods
// cgroup's PSI (some avg10) passes the threshold, the PSI trigger with
// root's 500 ms window wakes the loop, and the stalling pod is evicted.
func TestCgroup2AgentPSIThresholdActedOn(t *testing.T) {
	c := connect(t)
	n := startNode(t, c, "v2-psi", nodeOptions{config: "evictionHard: {allocatableMemory.pressure.some.avg10: \"10%\"}"})
	bystander := n.startPod("bystander", nil)
	bystander.send("ramp 16 100")
	bystander.reply(t, 30*time.Second)
	staller := n.startPod("staller", nil)
	writeFile(t, filepath.Join(cgroupMount, staller.cgroup, "memory.high"), strconv.FormatInt(24*mib, 10))
	start := time.Now()
	staller.send("ramp 200 1000") // throttled above memory.high for tens of seconds
	at := n.waitEvicted(t, staller.name, 90*time.Second)
	t.Logf("staller evicted %v after its throttled allocation started", at.Sub(start).Round(time.Millisecond))
	n.waitCondition(t, kube.ConditionMemoryPressure, kube.TaintKeyMemoryPressure, true, 20*time.Second)
	if _, ok := n.evictedAt(bystander.name); ok {
		t.Error("the bystander was evicted")
	}
	log, _ := os.ReadFile(n.logPath)
	if !strings.Contains(string(log), `"PSI trigger armed"`) && !strings.Contains(string(log), "PSI trigger armed") {
		t.Errorf("evictiond armed no PSI trigger; log:\n%s", lastLines(string(log), 40))
	}
}

// A pod starting hundreds of threads brings pid.available below its
// threshold: it is evicted (ranked by pids.current), the bystander is not,
// PIDPressure and its taint are set and cleared.
func TestCgroup2AgentPIDThreshold(t *testing.T) {
	c := connect(t)
	maxPID := min(readInt(t, "/proc/sys/kernel/pid_max"), readInt(t, "/proc/sys/kernel/threads-max"))
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	_, total, _ := strings.Cut(strings.Fields(string(raw))[3], "/")
	tasks, _ := strconv.ParseInt(total, 10, 64)
	// Met once about 300 more tasks run than now (evictiond's own included).
	threshold := maxPID - tasks - 300
	n := startNode(t, c, "v2-pid", nodeOptions{config: fmt.Sprintf("evictionHard: {pid.available: \"%d\"}", threshold)})
	bystander := n.startPod("bystander", nil)
	forker := n.startPod("forker", nil)
	start := time.Now()
	forker.send("threads 500")
	at := n.waitEvicted(t, forker.name, 60*time.Second)
	t.Logf("forker evicted %v after it started 500 threads", at.Sub(start).Round(time.Millisecond))
	n.waitCondition(t, kube.ConditionPIDPressure, kube.TaintKeyPIDPressure, true, 20*time.Second)
	if _, ok := n.evictedAt(bystander.name); ok {
		t.Error("the bystander was evicted")
	}
	n.waitCondition(t, kube.ConditionPIDPressure, kube.TaintKeyPIDPressure, false, 60*time.Second)
}

func mkCgroup(t *testing.T, cg string, inner bool) {
	t.Helper()
	dir := filepath.Join(cgroupMount, cg)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating cgroup %s: %v", dir, err)
	}
	if inner {
		writeFile(t, filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids")
	}
}

func rmCgroup(t *testing.T, cg string) {
	dir := filepath.Join(cgroupMount, cg)
	for range 100 {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("could not remove cgroup %s", dir)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatalf("writing %q to %s: %v", content, path, err)
	}
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
