//go:build integration

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
)

// Crash safety: evictiond is a real process (this test binary acting as it)
// killed with SIGKILL at one point of an eviction, then started again on the
// same node, state directory and configuration. Each point is reached without
// any hook in the binary: the test watches something the agent's work makes
// visible from outside (the API server's audit log, the agent's log, its
// state directory, the runtime's image list), stops the process with SIGSTOP
// at once (so it cannot get further), and kills it.

// crashRig is what survives the agent process: the node, its runtime, its
// configuration (a ConfigMap-style directory) and its state directory.
type crashRig struct {
	node, stateDir                       string
	ctrd                                 *containerd.Containerd
	cm                                   *configMapDir
	kubeletRoot, podLogs, imageFs, cgGrp string
}

func newCrashRig(t *testing.T, node string, ctrd *containerd.Containerd, hard string, extra ...string) *crashRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the crash tests create cgroups and run containerd: run them as root (make test-daemon)")
	}
	createNode(t, node)
	r := &crashRig{node: node, ctrd: ctrd, stateDir: t.TempDir(), kubeletRoot: t.TempDir(), podLogs: t.TempDir(),
		imageFs: t.TempDir(), cgGrp: makeCgroupRoot(t)}
	r.cm = newConfigMapDir(t, r.config(hard, extra...))
	return r
}

// config is a configuration for crash tests: a long podCleanupTimeout (so a
// second victim chosen too early cannot hide behind the wait's end), a 1 s
// transition period (so the test sees conditions released), image GC
// without minimum age, the state directory kept across restarts.
func (r *crashRig) config(hard string, extra ...string) string {
	return fmt.Sprintf(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
%s
evictionPressureTransitionPeriod: 1s
loop: {interval: 200ms, podCleanupTimeout: 60s}
stats: {housekeepingInterval: 1s}
reclaim:
  criEndpoint: %s
  imageGC: {stateFile: %s, minAge: 0s}
`, hard, r.ctrd.Endpoint, filepath.Join(r.stateDir, "images.json")) + strings.Join(extra, "\n")
}

func (r *crashRig) setConfig(t *testing.T, hard string, extra ...string) {
	t.Helper()
	r.cm.update(t, r.config(hard, extra...))
}

// agentProc is one evictiond process of a crashRig.
type agentProc struct {
	*runningDaemon
	cmd *exec.Cmd
}

// start runs a new evictiond process; it waits for /readyz unless noWait.
func (r *crashRig) start(t *testing.T, noWait bool) *agentProc {
	t.Helper()
	addr := freeAddress(t)
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "run", "--config", r.cm.path(), "--kubeconfig", env.KubeconfigPath, "--node-name", r.node,
		"--metrics-address", addr, "--health-address", addr, "--metrics-secure=false", "--kubelet-root-dir", r.kubeletRoot, "--pod-logs-dir", r.podLogs,
		"--image-fs-dir", r.imageFs, "--cgroup-root", r.cgGrp, "--debug")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &agentProc{runningDaemon: &runningDaemon{node: r.node, url: "http://" + addr, log: logs, done: exited}, cmd: cmd}
	t.Cleanup(func() {
		if !p.stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("evictiond (pid %d) log:\n%s", cmd.Process.Pid, logs.String())
		}
	})
	if !noWait {
		p.waitReady(t, 90*time.Second)
	}
	return p
}

// crash stops the process where it is (SIGSTOP) and kills it (SIGKILL).
func (p *agentProc) crash(t *testing.T, where string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", where, err)
	}
	p.kill(t, where)
}

func (p *agentProc) kill(t *testing.T, where string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", where, err)
	}
	<-p.done
	p.stopped = true
	t.Logf("evictiond (pid %d) killed %s", p.cmd.Process.Pid, where)
}

// terminate is the DaemonSet's ordinary stop: SIGTERM, exit 0.
func (p *agentProc) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.stopped = true
		if err != nil {
			t.Errorf("evictiond exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("evictiond still running 15s after SIGTERM")
	}
}

// waitLog waits for a log line holding every part.
func (p *agentProc) waitLog(t *testing.T, timeout time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.log.String(), "\n") {
			if containsAll(line, parts) {
				return line
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log line with %q within %v", parts, timeout)
	return ""
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// auditTail reads the audit log from where it stood when created, so a
// test can poll it every few milliseconds without re-reading the session.
type auditTail struct {
	f   *os.File
	r   *bufio.Reader
	got []auditEvent
}

func newAuditTail(t *testing.T) *auditTail {
	t.Helper()
	f, err := os.Open(env.AuditLogPath)
	if err != nil {
		t.Fatalf("opening the audit log: %v", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &auditTail{f: f, r: bufio.NewReaderSize(f, 1<<20)}
}

// evictions returns the agent's Eviction API calls logged so far.
func (a *auditTail) evictions(t *testing.T) []auditEvent {
	t.Helper()
	for {
		line, err := a.r.ReadBytes('\n')
		if err != nil {
			// A partial line stays for the next read.
			if len(line) > 0 {
				a.r = bufio.NewReaderSize(io.MultiReader(strings.NewReader(string(line)), a.f), 1<<20)
			}
			break
		}
		var e auditEvent
		if json.Unmarshal(line, &e) != nil || e.Stage != "ResponseComplete" || e.UserAgent != daemonUserAgent {
			continue
		}
		if e.Verb == "create" && e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "eviction" {
			a.got = append(a.got, e)
		}
	}
	return a.got
}

func terminatingPods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			out = append(out, p)
		}
	}
	return out
}

// ownsNothing: no evictiond taint and no condition evictiond holds True.
func ownsNothing(n *corev1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if strings.HasPrefix(taint.Key, kube.TaintKeyPrefix) {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Status == corev1.ConditionTrue && strings.HasPrefix(c.Reason, "Evictiond") {
			return false
		}
	}
	return true
}

func showsPressure(cond corev1.NodeConditionType, taint string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := findNodeCondition(n, cond)
		return c != nil && c.Status == corev1.ConditionTrue && strings.HasPrefix(c.Reason, "Evictiond") && hasTaint(n, taint)
	}
}

func assertNoJournal(t *testing.T, r *crashRig) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(r.stateDir, "local-stops.json")); !os.IsNotExist(err) {
		t.Errorf("local-stop journal in %s after the episode: %v; want none", r.stateDir, err)
	}
}

// TestRunCrashDuringEviction kills the agent after its Eviction API request
// (the audit log shows the POST) and, separately, while it waits for its
// victim (its log says so); the victim stays terminating (no kubelet runs
// it) until the test removes it, as a kubelet would. The restarted agent must
// not evict a second pod while the first is terminating, must evict the next
// only after the first is gone (the pressure, a threshold always met, is
// still there), must show the node's condition and taint under pressure and
// release them once the pressure ends, with no journal left behind.
func TestRunCrashDuringEviction(t *testing.T) {
	ctrd := containerd.Start(t, containerd.Options{})
	cases := []struct {
		name, node string
		killAt     func(t *testing.T, p *agentProc, audit *auditTail, ns string)
	}{
		{"killed after the eviction request", "crash-evict-node", func(t *testing.T, p *agentProc, audit *auditTail, ns string) {
			deadline := time.Now().Add(60 * time.Second)
			for len(audit.evictions(t)) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no Eviction API call by evictiond in the audit log within 60s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			p.crash(t, "right after its Eviction API request")
		}},
		{"killed while waiting for the victim", "crash-wait-node", func(t *testing.T, p *agentProc, audit *auditTail, ns string) {
			p.waitLog(t, 60*time.Second, `"msg":"no eviction this pass"`, "waiting for "+ns+"/", "to terminate (evicted")
			time.Sleep(time.Second) // a few passes into the wait
			p.crash(t, "while waiting for its victim")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.node
			ctx := context.Background()
			createPods(t, ns, tc.node, 4)
			r := newCrashRig(t, tc.node, ctrd, "  memory.available: 99%")
			audit := newAuditTail(t)

			first := r.start(t, false)
			tc.killAt(t, first, audit, ns)
			terminating := terminatingPods(t, ns)
			if len(terminating) != 1 {
				t.Fatalf("after the crash %d pods are terminating, want the one victim", len(terminating))
			}
			victim := terminating[0]
			t.Logf("victim %s, evicted before the crash", victim.Name)

			second := r.start(t, false)
			waitNode(t, r.node, "EvictiondMemoryPressure and the memory taint under pressure after the restart",
				showsPressure(kube.ConditionMemoryPressure, kube.TaintKeyMemoryPressure), 15*time.Second)
			time.Sleep(3 * time.Second) // 15 passes under pressure with the victim terminating
			if evs := audit.evictions(t); len(evs) != 1 {
				t.Fatalf("%d Eviction API calls by evictiond while the first victim terminates (last: %s), want 1",
					len(evs), evs[len(evs)-1].ObjectRef.Name)
			}
			if got := terminatingPods(t, ns); len(got) != 1 {
				t.Fatalf("%d pods terminating after the restart, want the one victim", len(got))
			}
			second.waitLog(t, time.Second, `"msg":"no eviction this pass"`, "waiting for "+ns+"/"+victim.Name+" to terminate (already terminating when evictiond started")

			// The kubelet's part: the victim's containers stop, its pod object goes.
			zero := int64(0)
			gone := time.Now()
			if err := env.Client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for len(audit.evictions(t)) < 2 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			evs := audit.evictions(t)
			if len(evs) != 2 {
				t.Fatalf("%d Eviction API calls once the first victim was gone and the pressure stayed; want a second one", len(evs))
			}
			if evs[1].ObjectRef.Name == victim.Name || evs[1].RequestReceivedTimestamp.Before(gone) {
				t.Errorf("second eviction of %s at %s; want another pod, after the first was gone (%s)",
					evs[1].ObjectRef.Name, evs[1].RequestReceivedTimestamp.Format(time.StampMicro), gone.Format(time.StampMicro))
			}

			r.setConfig(t, "  memory.available: 100Mi")
			waitNode(t, r.node, "no evictiond condition or taint once the pressure ended", ownsNothing, 30*time.Second)
			assertNoJournal(t, r)
			second.terminate(t)
		})
	}
}

// TestRunCrashDuringLocalStop kills the agent during a stop through the CRI
// (hard pressure, API server down), at the moment its journal of local stops
// appears in the state directory: the journal is written before the CRI call,
// so the stop may or may not have been made. The agent is started again while
// the API server is still down (it waits for it), then the API server comes
// back: the stop is reported once (Events, pod deleted through the API), the
// journal is removed, no other pod is evicted or deleted.
func TestRunCrashDuringLocalStop(t *testing.T) {
	const node, ns = "crash-localstop-node", "crash-localstop"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
	localStop := "eviction: {apiUnreachable: {criStop: true, after: 2s}}"
	r := newCrashRig(t, node, ctrd, "  memory.available: 100Mi", localStop)
	journal := filepath.Join(r.stateDir, "local-stops.json")
	first := r.start(t, false)
	since := time.Now()

	env.StopAPIServer()
	apiBack := false
	t.Cleanup(func() {
		if !apiBack {
			_ = env.StartAPIServer()
		}
	})
	r.setConfig(t, "  memory.available: 99%", localStop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(journal); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no local-stop journal %s within 60s of hard pressure with the API server down", journal)
		}
		time.Sleep(2 * time.Millisecond)
	}
	first.crash(t, "as its local-stop journal appeared")
	var entries []struct {
		Name string    `json:"name"`
		UID  types.UID `json:"uid"`
	}
	if err := json.Unmarshal([]byte(readFile(t, journal)), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("journal after the crash: %v entries, err %v; want one valid entry:\n%s", len(entries), err, readFile(t, journal))
	}
	victim := entries[0]
	st, err := rt.PodSandboxStatus(ctx, sandboxes[victim.UID], false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("journal names %s; its sandbox at the crash: %s", victim.Name, st.Status.State)

	// The pressure ends while the agent is down; it restarts before the API server.
	r.setConfig(t, "  memory.available: 100Mi", localStop)
	second := r.start(t, true)
	second.waitReadyz(t, 503, "startup", 30*time.Second)
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	apiBack = true
	second.waitReady(t, 90*time.Second)

	ev := waitEvents(t, ns, "PodStoppedLocally", func(e corev1.Event) bool { return e.InvolvedObject.UID == victim.UID }, 60*time.Second)
	if len(ev) != 1 || ev[0].Count > 1 {
		t.Errorf("PodStoppedLocally Events for %s: %d (count %d); want it reported once", victim.Name, len(ev), ev[0].Count)
	}
	waitEvents(t, "default", "PodStoppedLocally", func(e corev1.Event) bool { return e.InvolvedObject.Name == node }, 10*time.Second)
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(journal); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal %s still there 10s after the stop was reported:\n%s", journal, readFile(t, journal))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range pods {
		got, err := env.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		deleted := err != nil || got.DeletionTimestamp != nil
		if deleted != (p.UID == victim.UID) {
			t.Errorf("pod %s: deleted %v; want only the locally stopped %s deleted", p.Name, deleted, victim.Name)
		}
	}
	for _, w := range agentWrites(t, since) {
		if w.ObjectRef.Resource == "pods" && (w.ObjectRef.Subresource == "eviction" || w.ObjectRef.Name != victim.Name) {
			t.Errorf("pod write besides the report of %s: %s %s/%s %s", victim.Name, w.Verb, w.ObjectRef.Resource, w.ObjectRef.Subresource, w.ObjectRef.Name)
		}
	}
	waitNode(t, node, "no evictiond condition or taint", ownsNothing, 15*time.Second)
	second.terminate(t)
}

// TestRunCrashDuringImageGC kills the agent during node-level reclaim: image
// GC under imagefs pressure (containerd's root on a small tmpfs filled with
// images), the moment the runtime's image list loses its first image. The
// restarted agent reads its image state file, finishes the reclaim, evicts no
// pod (reclaim suffices), and releases DiskPressure and its taint.
func TestRunCrashDuringImageGC(t *testing.T) {
	const node, ns = "crash-imagegc-node", "crash-imagegc"
	const pad = 24 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 512 << 20})
	if _, err := ctrd.ImportSandboxImage(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		ref := fmt.Sprintf("example.test/crash-gc-%d:v1", i)
		spec, err := images.Busybox(ref, "/bin/sh", "-c", "exit 0")
		if err != nil {
			t.Fatal(err)
		}
		spec.Files = append(spec.Files, images.Padding("/pad", pad, ref))
		if _, err := images.Import(ctx, ctrd.Socket, containerd.CRINamespace, spec); err != nil {
			t.Fatal(err)
		}
	}
	logger := klog.Background()
	is, err := criclient.NewRemoteImageService(ctrd.Endpoint, 30*time.Second, nil, &logger)
	if err != nil {
		t.Fatalf("CRI image client: %v", err)
	}
	countImages := func() int {
		list, err := is.ListImages(ctx, nil)
		if err != nil {
			t.Fatalf("ListImages: %v", err)
		}
		return len(list)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(ctrd.Root, &fs); err != nil {
		t.Fatal(err)
	}
	avail := int64(fs.Bavail) * fs.Bsize
	// Ask for about seven paddings more (four images) than is free: GC has to remove
	// several, one at a time, and the crash comes after the first.
	want := avail + 7*pad
	t.Logf("imagefs %s: %d MiB available; threshold %d MiB; %d images", ctrd.Root, avail>>20, want>>20, countImages())
	hard := fmt.Sprintf("  imagefs.available: %dMi", want>>20)
	createPods(t, ns, node, 2)
	r := newCrashRig(t, node, ctrd, "  imagefs.available: 1Mi")
	since := time.Now()
	first := r.start(t, false)
	before := countImages()
	r.setConfig(t, hard)
	deadline := time.Now().Add(60 * time.Second)
	for countImages() == before {
		if time.Now().After(deadline) {
			t.Fatalf("no image removed within 60s of imagefs pressure")
		}
		time.Sleep(2 * time.Millisecond)
	}
	first.crash(t, "as image GC removed its first image")
	mid := countImages()
	t.Logf("images: %d before, %d at the crash", before, mid)
	var state map[string]any
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(r.stateDir, "images.json"))), &state); err != nil {
		t.Errorf("image state file after the crash is not valid JSON: %v", err)
	}

	second := r.start(t, false)
	waitNode(t, node, "DiskPressure released once image GC freed enough", func(n *corev1.Node) bool {
		c := findNodeCondition(n, kube.ConditionDiskPressure)
		return (c == nil || c.Status == corev1.ConditionFalse) && ownsNothing(n)
	}, 60*time.Second)
	second.waitMetric(t, `evictiond_threshold_met{kind="hard",signal="imagefs.available"}`, eq(0), "imagefs threshold no longer met", 15*time.Second)
	after := countImages()
	if after >= mid {
		t.Errorf("images: %d at the crash, %d after the restart; want the restarted agent to finish the reclaim", mid, after)
	}
	if err := syscall.Statfs(ctrd.Root, &fs); err != nil {
		t.Fatal(err)
	}
	if got := int64(fs.Bavail) * fs.Bsize; got < want {
		t.Errorf("imagefs available %d MiB after the reclaim, want at least the threshold %d MiB", got>>20, want>>20)
	}
	for _, w := range agentWrites(t, since) {
		if w.ObjectRef.Resource == "pods" {
			t.Errorf("pod write during an episode image GC resolved: %s %s/%s %s", w.Verb, w.ObjectRef.Resource, w.ObjectRef.Subresource, w.ObjectRef.Name)
		}
	}
	if got := terminatingPods(t, ns); len(got) != 0 {
		t.Errorf("%d pods evicted; image GC alone met the need", len(got))
	}
	second.waitMetric(t, `evictiond_reclaim_runs_total{result="ok",step="imageGC"}`, func(v float64) bool { return v >= 1 }, "the restarted agent ran image GC", 5*time.Second)
	assertNoJournal(t, r)
	second.terminate(t)
}
