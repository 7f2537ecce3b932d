//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// TestSoak runs evictiond on the one-node cluster for EVICTIOND_SOAK_DURATION
// (default 3m, the short form in make test; make soak runs 60m): cycles of a
// pressure episode (memory, disk, PIDs in turn), a ConfigMap reload, and a
// restart of the API server or of containerd (in turn). The agent's RSS, open
// fds and goroutines (its go_goroutines) are sampled every 5 s, and once per
// cycle at a quiet moment (no pressure, everything reconnected); its API
// requests come from the audit log. It fails when the quiet samples'
// goroutines or fds grow (a least-squares slope over the cycles, with a
// tolerance), when the agent restarts, or when an episode does not end with
// evictiond's eviction.
func TestSoak(t *testing.T) {
	duration := 3 * time.Minute
	if v := os.Getenv("EVICTIOND_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("EVICTIOND_SOAK_DURATION: value %q: must be a positive duration", v)
		}
		duration = d
	}
	c, pod := clusterWithEvictiond(t, cluster.Options{AuditLog: true}, cluster.DeployOptions{})
	ctx := context.Background()
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]

	s := &soakSampler{podUID: pod.UID, cluster: c}
	if s.pid, err = s.findPID(); err != nil {
		t.Fatal(err)
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			s.sample(false)
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	start := time.Now()
	s.quiet()
	kinds := []string{"memory", "disk", "pids"}
	var cycles int
	// At least one cycle of each episode kind, however slow the machine.
	for i := 0; i < len(kinds) || time.Since(start) < duration; i++ {
		kind := kinds[i%len(kinds)]
		t.Run(fmt.Sprintf("cycle-%02d-%s", i, kind), func(t *testing.T) {
			switch kind {
			case "memory":
				soakMemoryEpisode(t, c, i)
			case "disk":
				soakDiskEpisode(t, c, original, i)
			case "pids":
				soakPIDEpisode(t, c, original, i)
			}
			soakReload(t, c, original, i)
			if i%2 == 0 {
				c.API.StopAPIServer()
				time.Sleep(5 * time.Second)
				if err := c.API.StartAPIServer(); err != nil {
					t.Fatalf("restarting the API server: %v", err)
				}
			} else {
				c.Containerd.Kill()
				time.Sleep(2 * time.Second)
				c.Containerd.Restart(t)
			}
			if _, err := c.WaitEvictiondReady(ctx, 2*time.Minute); err != nil {
				t.Fatalf("evictiond not Ready after the restart: %v", err)
			}
			if i%2 == 0 {
				soakWaitKubelet(t, c, i)
			}
		})
		s.quiet()
		cycles++
	}
	elapsed := time.Since(start)
	close(stopSampling)
	<-sampled

	requests := agentRequests(t, c.API.AuditLogPath, start, start.Add(elapsed))
	var total int
	for _, n := range requests {
		total += n
	}
	perHour := func(n int) float64 { return float64(n) / elapsed.Hours() }
	s.mu.Lock()
	all, quiet, restarts := s.all, s.quietSamples, s.restarts
	s.mu.Unlock()
	slope := func(samples []soakSample, f func(soakSample) float64) float64 {
		xs := make([]float64, len(samples))
		ys := make([]float64, len(samples))
		for i, x := range samples {
			xs[i], ys[i] = x.at.Sub(start).Hours(), f(x)
		}
		return fitSlope(xs, ys)
	}
	rss := func(x soakSample) float64 { return float64(x.rssKiB) / 1024 }
	fds := func(x soakSample) float64 { return float64(x.fds) }
	gor := func(x soakSample) float64 { return float64(x.goroutines) }
	t.Logf("soak: %v, %d cycles (memory, disk, PID episodes; ConfigMap reloads; API server and containerd restarts), %d samples", elapsed.Round(time.Second), cycles, len(all))
	t.Logf("%-12s %10s %10s %10s %14s %14s", "", "first", "last", "max", "slope/h (all)", "slope/h (quiet)")
	for _, m := range []struct {
		name string
		f    func(soakSample) float64
	}{{"RSS MiB", rss}, {"open fds", fds}, {"goroutines", gor}} {
		var hi float64
		for _, x := range all {
			hi = max(hi, m.f(x))
		}
		t.Logf("%-12s %10.1f %10.1f %10.1f %14.2f %14.2f", m.name, m.f(quiet[0]), m.f(quiet[len(quiet)-1]), hi, slope(all, m.f), slope(quiet, m.f))
	}
	keys := make([]string, 0, len(requests))
	for k := range requests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("API requests by evictiond: %d in %v (%.0f per hour)", total, elapsed.Round(time.Second), perHour(total))
	for _, k := range keys {
		t.Logf("  %-36s %6d  %8.0f/h", k, requests[k], perHour(requests[k]))
	}
	for _, q := range quiet {
		t.Logf("quiet sample at %6v: RSS %5.1f MiB, fds %3d, goroutines %4d", q.at.Sub(start).Round(time.Second), rss(q), q.fds, q.goroutines)
	}

	if restarts > 0 {
		t.Errorf("evictiond's process changed %d times during the soak; want it running throughout", restarts)
	}
	// Growth of the fitted line over the run, at quiet moments: a leak of one
	// goroutine or fd per cycle shows as about one per cycle.
	hours := elapsed.Hours()
	if len(quiet) >= 3 {
		// The tolerances absorb the count's noise at quiet moments (±4
		// goroutines: HTTP/2 streams and watches being re-opened) and still
		// catch a leak per pass (hundreds in minutes) in the short form and a
		// leak per cycle in the hour.
		if tol := max(20, float64(cycles)/2); slope(quiet, gor)*hours > tol {
			t.Errorf("goroutines grow: fitted %+.1f over the soak's %d quiet samples (%.1f per hour); tolerance %v", slope(quiet, gor)*hours, len(quiet), slope(quiet, gor), tol)
		}
		if tol := max(8, float64(cycles)/4); slope(quiet, fds)*hours > tol {
			t.Errorf("open fds grow: fitted %+.1f over the soak's %d quiet samples (%.1f per hour); tolerance %v", slope(quiet, fds)*hours, len(quiet), slope(quiet, fds), tol)
		}
	} else {
		t.Errorf("only %d quiet samples: the soak is too short to fit a slope (EVICTIOND_SOAK_DURATION=%v)", len(quiet), duration)
	}
}

// soakSample is one reading of the agent.
type soakSample struct {
	at         time.Time
	rssKiB     int64
	fds        int
	goroutines int
}

type soakSampler struct {
	podUID  types.UID
	cluster *cluster.Cluster // scrapes evictiond's /metrics with the scraper's token

	mu           sync.Mutex
	pid          int
	restarts     int
	all          []soakSample
	quietSamples []soakSample
}

// findPID finds evictiond's process by the pod's cgroup.
func (s *soakSampler) findPID() (int, error) {
	want := "pod" + string(s.podUID)
	alt := "pod" + strings.ReplaceAll(string(s.podUID), "-", "_") // systemd driver
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !(strings.Contains(string(cg), want) || strings.Contains(string(cg), alt)) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "evictiond" && args[1] == "run" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no evictiond process in the cgroup of pod %s", s.podUID)
}

// sample reads the agent once; quiet ones are kept apart for the slope.
func (s *soakSampler) sample(quiet bool) {
	s.mu.Lock()
	pid := s.pid
	s.mu.Unlock()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		// The process is gone: the container restarted (or is restarting).
		next, err := s.findPID()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err == nil && next != s.pid {
			s.restarts++
			s.pid = next
		}
		return
	}
	x := soakSample{at: time.Now()}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			x.rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	x.fds = len(fds)
	lines, err := evictiondMetrics(s.cluster, "go_goroutines ")
	if err != nil || len(lines) != 1 {
		return // the metrics endpoint is busy or restarting; skip this one
	}
	x.goroutines, _ = strconv.Atoi(strings.Fields(lines[0])[1])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, x)
	if quiet {
		s.quietSamples = append(s.quietSamples, x)
	}
}

// quiet takes the cycle's quiet sample: after 10 s without pressure or
// restarts (watches re-established, Events flushed).
func (s *soakSampler) quiet() {
	time.Sleep(10 * time.Second)
	s.sample(true)
}

// fitSlope is the least-squares slope of ys over xs.
func fitSlope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// agentRequests counts evictiond's requests in the audit log between from
// and to, by "verb resource[/subresource]".
func agentRequests(t *testing.T, auditPath string, from, to time.Time) map[string]int {
	t.Helper()
	out := map[string]int{}
	forEachLine(t, auditPath, func(line string) bool {
		if !strings.Contains(line, `"userAgent":"evictiond`) {
			return true
		}
		var ev struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef struct {
				Resource, Subresource string
			} `json:"objectRef"`
			RequestURI      string    `json:"requestURI"`
			RequestReceived time.Time `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Stage != "ResponseComplete" || ev.UserAgent != "evictiond" ||
			ev.RequestReceived.Before(from) || ev.RequestReceived.After(to) {
			return true
		}
		res := ev.ObjectRef.Resource
		if res == "" {
			res = ev.RequestURI
		}
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		out[ev.Verb+" "+res]++
		return true
	})
	return out
}

// soakEvictedByEvictiond fails unless evictiond evicted name in ns.
func soakEvictedByEvictiond(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	for _, ev := range evictionEvents(t, c, ns) {
		if ev.InvolvedObject.Name == name && ev.Source.Component == "evictiond" {
			t.Logf("%s evicted: %s", name, ev.Message)
			return
		}
	}
	t.Errorf("%s/%s gone without an Evicted Event from evictiond\n--- evictiond ---\n%s", ns, name, c.EvictiondLogTail(20))
}

// soakWaitKubelet waits until the node's kubelet starts a new pod after an API
// server restart. The kubelet's pod informer is client-go's: after a restart its
// re-watch gets 410 and it lists again only after its backoff, which keeps its
// steps for two minutes, so a restart a minute after the last one can leave it
// blind for up to a minute, and the next episode's pods would time out waiting
// to start (seen on 2026-11-23: pods created at 13:57:55 reached the kubelet at
// 13:58:49). evictiond's own pod cache no longer waits like that (docs/e2e.md);
// make test-daemon's TestRunPodCacheSeesPodsSoonAfterAPIServerRestarts holds it
// to 15 s.
func soakWaitKubelet(t *testing.T, c *cluster.Cluster, i int) {
	t.Helper()
	ns := fmt.Sprintf("soak-probe-%d", i)
	createNamespace(t, c.Client, ns)
	probe := podOnNode(ns, "probe", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "32Mi"), resources("cpu", "10m", "memory", "32Mi")))
	start := time.Now()
	if _, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), probe, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the kubelet probe pod: %v", err)
	}
	waitPod(t, c, ns, "probe", 3*time.Minute, "Ready", podReady)
	t.Logf("kubelet started a pod %v after the API server restart", time.Since(start).Round(100*time.Millisecond))
}

func soakMemoryEpisode(t *testing.T, c *cluster.Cluster, i int) {
	e := &memoryEpisode{Namespace: fmt.Sprintf("soak-memory-%d", i), HogRateMiB: 200}
	e.run(t, c, nil)
	soakEvictedByEvictiond(t, c, e.Namespace, "hog")
}

// soakDiskEpisode: nodefs threshold 512 MiB below today's free space, a pod
// filling an emptyDir past it; the pinned images leave image GC nothing, so
// the filler is evicted.
func soakDiskEpisode(t *testing.T, c *cluster.Cluster, original string, i int) {
	ns := fmt.Sprintf("soak-disk-%d", i)
	createNamespace(t, c.Client, ns)
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	threshold := diskAvailable(t, c.KubeletRootDir) - 512<<20
	mi := fmt.Sprintf("%dMi", threshold>>20)
	edited := strings.Replace(original, "nodefs.available: 2%", "nodefs.available: "+mi, 1)
	edited = strings.Replace(edited, "imagefs.available: 2%", "imagefs.available: "+mi, 1)
	if !strings.Contains(edited, "nodefs.available: "+mi) {
		t.Fatalf("could not set the disk thresholds in the e2e config:\n%s", edited)
	}
	setEvictiondConfig(t, c, edited)
	waitConfigApplied(t, c, `evictiond_threshold_bytes{kind="hard",signal="nodefs.available"}`, float64(threshold>>20<<20))
	filler := podOnNode(ns, "filler", workloadContainer("diskfill", []string{"-dir=/scratch", "-rate-mib=150", "-target-mib=4096"},
		resources("cpu", "100m", "memory", "64Mi"), nil))
	filler.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	filler.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	created, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), filler, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, c, ns, "filler", created.UID, 3*time.Minute)
	soakEvictedByEvictiond(t, c, ns, "filler")
	setEvictiondConfig(t, c, original)
	waitConfigApplied(t, c, `evictiond_threshold_bytes{kind="hard",signal="nodefs.available"}`, -1)
}

// soakPIDEpisode: pid.available threshold 1500 below today's availability, a
// pod starting 3000 threads.
func soakPIDEpisode(t *testing.T, c *cluster.Cluster, original string, i int) {
	ns := fmt.Sprintf("soak-pids-%d", i)
	createNamespace(t, c.Client, ns)
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	setPIDThresholdForHog(t, c, original)
	created, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), pidHog(ns), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, c, ns, "pidhog", created.UID, 2*time.Minute)
	soakEvictedByEvictiond(t, c, ns, "pidhog")
	setEvictiondConfig(t, c, original)
}

// soakReload applies the configuration again with a changed comment: a
// reload the agent must take without restarting.
func soakReload(t *testing.T, c *cluster.Cluster, original string, i int) {
	before := reloadCount(c)
	setEvictiondConfig(t, c, original+fmt.Sprintf("# soak reload %d\n", i))
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return reloadCount(c) > before, nil
	})
	if err != nil {
		t.Errorf("ConfigMap edit not reloaded within 90s (reloads_total{result=\"success\"} stayed %v)", before)
	}
}

func reloadCount(c *cluster.Cluster) float64 {
	lines, err := evictiondMetrics(c, `evictiond_config_reloads_total{result="success"} `)
	if err != nil || len(lines) != 1 {
		return -1
	}
	v, _ := strconv.ParseFloat(strings.Fields(lines[0])[1], 64)
	return v
}
