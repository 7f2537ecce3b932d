//go:build e2e && bench_footprint

package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/testenv/proc"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// footprintPods is the node's pod count while the costs are measured: the kubelet's
// default maxPods, evictiond's own pod included.
const footprintPods = 110

// nodeExporterBin is Debian's prometheus-node-exporter (make bench-footprint installs it).
const nodeExporterBin = "/usr/bin/prometheus-node-exporter"

// footprint is one process's cost over the measurement window.
type footprint struct {
	name           string
	pid            int
	rssEnd, rssMax int64
	cpuTicks0      int64
	cpuPercent     float64
}

// TestBenchFootprint measures what evictiond costs a node at rest, next to what the node's
// other agents cost in the same minute (issue 29, "the DaemonSet tax"): the e2e cluster
// with evictiond deployed from deploy/ (GOMEMLIMIT from its memory limit, as shipped) and
// the node filled to 110 pods (idle containers), then over FOOTPRINT_WINDOW (60 s) the
// resident memory and CPU of evictiond, the kubelet, and node_exporter (Debian's, all
// default collectors), each scraped every 15 s as Prometheus would. evictiond's mean pass
// time comes from its own pass_duration_seconds histogram over the window. It prints
// "footprint:" lines (make bench-footprint) and asserts nothing about the figures.
func TestBenchFootprint(t *testing.T) {
	if _, err := os.Stat(nodeExporterBin); err != nil {
		t.Fatalf("node_exporter: %v (install Debian package prometheus-node-exporter: make bench-footprint does)", err)
	}
	window := 60 * time.Second
	if v := os.Getenv("FOOTPRINT_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FOOTPRINT_WINDOW=%q: %v", v, err)
		}
		window = d
	}
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	agent, err := c.DeployEvictiond(ctx, cluster.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fillNode(t, c, footprintPods)
	t.Logf("node filled to %d pods in %s", footprintPods, time.Since(start).Round(time.Second))
	// Past the start-up storm: the watch events of 110 pods starting, their first
	// housekeeping, the scraper's first token review.
	time.Sleep(30 * time.Second)

	exporterAddr := startNodeExporter(t, c)
	agentPid, err := cluster.ProcessOfPod("evictiond", string(agent.UID))
	if err != nil {
		t.Fatal(err)
	}
	procs := []*footprint{{name: "evictiond", pid: agentPid}, {name: "kubelet", pid: c.KubeletPid()},
		{name: "node_exporter", pid: exporterAddr.pid}}
	scrape := func() {
		if _, err := c.EvictiondMetrics(ctx); err != nil {
			t.Errorf("scraping evictiond: %v", err)
		}
		if err := httpGetOK("http://" + exporterAddr.addr + "/metrics"); err != nil {
			t.Errorf("scraping node_exporter: %v", err)
		}
	}
	scrape()
	before := scrapePasses(t, c)
	for _, p := range procs {
		if p.cpuTicks0, err = proc.CPUTicks(p.pid); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	if out := os.Getenv("FOOTPRINT_PERF"); out != "" {
		// perf record of evictiond over the window, for where its CPU goes (symbols: go tool
		// addr2line on an unstripped build of the same tree, see docs/benchmarks.md).
		rec := exec.Command("perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(agentPid), "-o", out, "--", "sleep", strconv.Itoa(int(window.Seconds())))
		rec.Stdout, rec.Stderr = io.Discard, io.Discard
		if err := rec.Start(); err != nil {
			t.Fatalf("FOOTPRINT_PERF: %v", err)
		}
		defer func() { _ = rec.Wait() }()
	}
	begin := time.Now()
	lastScrape := begin
	for time.Since(begin) < window {
		for _, p := range procs {
			rss, err := proc.RSSBytes(p.pid)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			p.rssEnd, p.rssMax = rss, max(p.rssMax, rss)
		}
		if time.Since(lastScrape) >= 15*time.Second {
			scrape()
			lastScrape = time.Now()
		}
		time.Sleep(time.Second)
	}
	elapsed := time.Since(begin).Seconds()
	after := scrapePasses(t, c)
	for _, p := range procs {
		ticks, err := proc.CPUTicks(p.pid)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		p.cpuPercent = 100 * float64(ticks-p.cpuTicks0) / 100 / elapsed // USER_HZ is 100
	}
	onNode, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", cluster.NodeName).String()})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("footprint: %d pods on the node, %s window, each process scraped every 15 s\n", len(onNode.Items), time.Duration(elapsed*float64(time.Second)).Round(time.Second))
	for _, p := range procs {
		fmt.Printf("footprint: %-13s RSS %5.1f MiB (max %5.1f MiB), CPU %5.2f %% of a core\n", p.name,
			float64(p.rssEnd)/(1<<20), float64(p.rssMax)/(1<<20), p.cpuPercent)
	}
	fmt.Printf("footprint: evictiond memory at the end: %s\n", memoryBreakdown(t, c, agentPid))
	if n := after.count - before.count; n > 0 {
		fmt.Printf("footprint: evictiond passes %d in the window, mean %.2f ms (evictiond_pass_duration_seconds)\n",
			int(n), 1000*(after.sum-before.sum)/n)
	} else {
		t.Errorf("evictiond ran no pass in %v (pass_duration_seconds_count %v → %v)", window, before.count, after.count)
	}
	// The GC's share of the idle CPU follows from these: what the process allocates (passes,
	// polls, walks, scrapes; the window's scrapes included) and how often that made it collect.
	fmt.Printf("footprint: evictiond allocated %.0f KB/s, %d collections in the window (go_memstats_alloc_bytes_total, go_gc_duration_seconds_count)\n",
		(after.allocated-before.allocated)/1000/elapsed, int(after.gcs-before.gcs))
	if restarts := agentRestarts(t, c); restarts != 0 {
		t.Errorf("evictiond restarted %d times during the bench: the figures are not of one process", restarts)
	}
}

// fillNode creates idle pods on the node until it runs total pods, and waits until every
// one is Running and Ready.
func fillNode(t *testing.T, c *cluster.Cluster, total int) {
	t.Helper()
	const ns = "bench-footprint"
	createNamespace(t, c.Client, ns)
	ctx := context.Background()
	selector := fields.OneTermEqualSelector("spec.nodeName", cluster.NodeName).String()
	existing, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	want := total - len(existing.Items)
	var wg sync.WaitGroup
	errs := make(chan error, want)
	for i := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := podOnNode(ns, fmt.Sprintf("idle-%03d", i), workloadContainer("idle", nil, resources("cpu", "1m", "memory", "8Mi"), nil))
			if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("creating pod %s: %w", p.Name, err)
			}
		}()
		if i%10 == 9 {
			wg.Wait() // ten at a time: the API server and the kubelet share two cores
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ready int
	err = wait.PollUntilContextTimeout(ctx, time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready = 0
		for i := range pods.Items {
			if pods.Items[i].Status.Phase == corev1.PodRunning && podReady(&pods.Items[i]) {
				ready++
			}
		}
		return ready == want, nil
	})
	if err != nil {
		t.Fatalf("%d of %d idle pods Ready after 8 min: %v\n--- kubelet ---\n%s", ready, want, err, c.LogTail("kubelet", 30))
	}
}

type exporter struct {
	addr string
	pid  int
}

// startNodeExporter runs node_exporter on a loopback port with its default collectors,
// its log in the cluster directory, stopped at the test's end.
func startNodeExporter(t *testing.T, c *cluster.Cluster) exporter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log, err := os.Create(filepath.Join(c.Dir, "node-exporter.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nodeExporterBin, "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node_exporter: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return httpGetOK("http://"+addr+"/metrics") == nil, nil
	})
	if err != nil {
		t.Fatalf("node_exporter not answering on %s within 30 s", addr)
	}
	return exporter{addr: addr, pid: cmd.Process.Pid}
}

func httpGetOK(url string) error {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// passes is what evictiond's /metrics says of its passes and of its Go runtime's
// allocations and collections, read before and after the window.
type passes struct{ sum, count, allocated, gcs float64 }

// scrapePasses reads evictiond's pass_duration_seconds histogram's sum and count, the
// bytes its Go runtime allocated so far and the collections it ran.
func scrapePasses(t *testing.T, c *cluster.Cluster) passes {
	t.Helper()
	text, err := c.EvictiondMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var p passes
	var seen int
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		switch name {
		case "evictiond_pass_duration_seconds_sum":
			p.sum, seen = v, seen+1
		case "evictiond_pass_duration_seconds_count":
			p.count, seen = v, seen+1
		case "go_memstats_alloc_bytes_total":
			p.allocated, seen = v, seen+1
		case "go_gc_duration_seconds_count":
			p.gcs, seen = v, seen+1
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	if seen != 4 {
		t.Fatal("evictiond's /metrics lacks one of evictiond_pass_duration_seconds_sum and _count, go_memstats_alloc_bytes_total, go_gc_duration_seconds_count")
	}
	return p
}

// memoryBreakdown says what evictiond's resident memory is: anonymous and file-backed
// (the binary's pages) from /proc/<pid>/smaps_rollup, and the Go runtime's heap in use,
// heap held but unused (not yet returned to the kernel) and stacks, from its /metrics.
func memoryBreakdown(t *testing.T, c *cluster.Cluster, pid int) string {
	t.Helper()
	kib, err := proc.SmapsRollupKiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	text, err := c.EvictiondMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gauge := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if ok && strings.HasPrefix(name, "go_memstats_") {
			gauge[name], _ = strconv.ParseFloat(strings.TrimSpace(value), 64)
		}
	}
	const mib = 1 << 20
	return fmt.Sprintf("container working set %s; anonymous %.1f MiB, file %.1f MiB; Go heap in use %.1f MiB, heap idle not released %.1f MiB, stacks %.1f MiB, runtime total %.1f MiB",
		containerWorkingSet(t, pid), kib["Anonymous"]/1024, (kib["Rss"]-kib["Anonymous"])/1024, gauge["go_memstats_heap_inuse_bytes"]/mib,
		(gauge["go_memstats_heap_idle_bytes"]-gauge["go_memstats_heap_released_bytes"])/mib, gauge["go_memstats_stack_inuse_bytes"]/mib,
		gauge["go_memstats_sys_bytes"]/mib)
}

// containerWorkingSet is what the kubelet and metrics-server report for the process's
// memory cgroup (its container's), container_memory_working_set_bytes: usage minus
// inactive file pages, on cgroup v1 (this machine) or v2. It is what the container's memory
// limit and `kubectl top` see; unlike RSS it leaves out the binary's pages when the page
// cache holding them is charged to another cgroup (the one that wrote the image's files).
func containerWorkingSet(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	usageFile, inactiveKey, dir := "", "", ""
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			dir, usageFile, inactiveKey = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.usage_in_bytes", "total_inactive_file"
		case parts[0] == "0" && parts[1] == "" && dir == "":
			dir, usageFile, inactiveKey = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.current", "inactive_file"
		}
	}
	if dir == "" {
		return "unknown (no memory cgroup in /proc/<pid>/cgroup)"
	}
	raw, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	usage, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", dir, usageFile, err)
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	var inactive float64
	for _, line := range strings.Split(string(stat), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == inactiveKey {
			inactive, _ = strconv.ParseFloat(v, 64)
		}
	}
	return fmt.Sprintf("%.1f MiB (usage %.1f − inactive file %.1f)", (usage-inactive)/(1<<20), usage/(1<<20), inactive/(1<<20))
}

// agentRestarts is the restart count of evictiond's container.
func agentRestarts(t *testing.T, c *cluster.Cluster) int32 {
	t.Helper()
	pod, err := c.EvictiondPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, s := range pod.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}
