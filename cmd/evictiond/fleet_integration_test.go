//go:build integration

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/simulate"
)

// A fleet of agents against one API server (make bench-fleet): FLEET_NODES
// Nodes with FLEET_PODS pods spread over them (no kubelet: the pods stay
// Pending, live pods to the agents), and one agent per node built from the
// daemon's own parts (its own client with the daemon's limits and a
// connection of its own, node-scoped informers, Event recorder, node status
// writer, evictor, the decision loop), each authenticated like a DaemonSet
// pod (a ServiceAccount token bound to an evictiond pod on its node, so the
// RBAC rules, the admission policy and API priority and fairness treat it as
// in a cluster), fed synthetic memory readings. Phases: quiet (no pressure),
// then a storm (every node crosses its hard memory threshold at once, for
// FLEET_STORM, then the pressure ends everywhere). Requests are counted at
// each agent's transport, by verb and resource, 429s included.

type fleetOptions struct {
	nodes, pods                int
	quiet, storm, flap, settle time.Duration
}

func fleetOptionsFromEnv(b *testing.B) fleetOptions {
	o := fleetOptions{nodes: 200, pods: 20000, quiet: 60 * time.Second, storm: 20 * time.Second, flap: 30 * time.Second, settle: 3 * time.Minute}
	for name, dst := range map[string]*int{"FLEET_NODES": &o.nodes, "FLEET_PODS": &o.pods} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				b.Fatalf("%s: value %q: must be a positive integer", name, v)
			}
			*dst = n
		}
	}
	for name, dst := range map[string]*time.Duration{"FLEET_QUIET": &o.quiet, "FLEET_STORM": &o.storm, "FLEET_FLAP": &o.flap} {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				b.Fatalf("%s: value %q: must be a positive duration", name, v)
			}
			*dst = d
		}
	}
	return o
}

// fleetConfig: the shipped loop and node status settings, a hard memory
// threshold, a short transition period so the release is part of the episode.
const fleetConfig = `evictionHard: {memory.available: 100Mi}
evictionPressureTransitionPeriod: 10s
enforceNodeAllocatable: []
loop: {interval: 1s, podCleanupTimeout: 30s}
`

// requestCounter counts requests at the transport, by "verb resource".
type requestCounter struct {
	mu        sync.Mutex
	counts    map[string]int
	throttled map[string]int // HTTP 429 answers by "verb resource" (client-go retries them)
	failed    int            // transport errors and 5xx
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[string]int{}, throttled: map[string]int{}}
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		key := requestKey(req)
		c.mu.Lock()
		c.counts[key]++
		switch {
		case err != nil || resp.StatusCode >= 500:
			c.failed++
		case resp.StatusCode == http.StatusTooManyRequests:
			c.throttled[key]++
		}
		c.mu.Unlock()
		return resp, err
	})
}

// snapshot returns the counts so far (requests, 429s, by "verb resource";
// failures) and resets them.
func (c *requestCounter) snapshot() (map[string]int, map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, th, f := c.counts, c.throttled, c.failed
	c.counts, c.throttled, c.failed = map[string]int{}, map[string]int{}, 0
	return out, th, f
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// requestKey is the request's verb as the API server's audit log and
// metrics name it, and its resource (with subresource).
func requestKey(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	var res, name, sub string
	if len(parts) > 0 {
		res = parts[0]
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		sub = parts[2]
		res += "/" + sub
	}
	verb := strings.ToLower(req.Method)
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case name == "":
			verb = "list"
		default:
			verb = "get"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	}
	return verb + " " + res
}

func isWrite(key string) bool {
	v, _, _ := strings.Cut(key, " ")
	return v == "create" || v == "update" || v == "patch" || v == "delete"
}

// fleetNode is a node's synthetic reading: plenty of memory, or 50Mi of
// 24Gi available (below the 100Mi hard threshold) while pressure is set. The
// rest of the node (freezer, reclaim, local stop) is a scenario's, with no
// pods of its own.
type fleetNode struct {
	*simulate.Node
	pressure *atomic.Bool
}

func newFleetNode(name string, pressure *atomic.Bool) fleetNode {
	return fleetNode{Node: simulate.NewNode(&simulate.Scenario{Node: simulate.NodeSpec{Name: name}}, time.Now), pressure: pressure}
}

func (s fleetNode) ObserveFast() policy.Observations {
	return s.Observe(context.Background(), nil).Observations
}

func (s fleetNode) Observe(_ context.Context, _ []*corev1.Pod) agent.Observed {
	avail := int64(16 << 30)
	if s.pressure.Load() {
		avail = 50 << 20
	}
	return agent.Observed{Observations: policy.Observations{
		policy.SignalMemoryAvailable: {Available: avail, Capacity: 24 << 30, Time: time.Now()}}, Pods: policy.PodStatsByUID{}}
}

func (s fleetNode) ObserveUsage(_ context.Context, pods []*corev1.Pod, obs *agent.Observed) {
	now := time.Now()
	for i, p := range pods {
		mem := int64(64+i) << 20
		obs.Pods[p.UID] = policy.PodStats{MemoryWorkingSet: &mem, Time: now}
	}
}

// startFleetAgent builds one agent with the daemon's own wiring
// (internal/daemon), minus what reads the machine (monitor, fast path,
// reclaim) and the HTTP endpoints.
func startFleetAgent(ctx context.Context, node string, self types.UID, base *rest.Config, cfg *policy.Config,
	counter *requestCounter, n daemon.Node, log *slog.Logger) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var cleanups []func()
	stop = func() {
		cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	restCfg := rest.CopyConfig(base)
	reach := &kube.Reachability{}
	restCfg.Wrap(reach.Wrap)
	restCfg.Wrap(counter.wrap)
	restCfg.UserAgent = "evictiond"
	daemon.SetClientLimits(restCfg)
	// A dialer of its own: client-go shares one transport (one HTTP/2
	// connection) between clients of equal TLS settings; every DaemonSet
	// pod has its own.
	restCfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	client, err := daemon.NewClient(restCfg)
	if err != nil {
		return stop, err
	}
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client, Node: n, APIReachable: reach.Reachable},
		daemon.Options{NodeName: node, SelfUID: self, NodeStatus: true, Logger: log})
	if err != nil {
		return stop, fmt.Errorf("node %s: %w", node, err)
	}
	cleanups = append(cleanups, d.Close)
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	cleanups = append(cleanups, func() { <-done })
	return stop, nil
}

// nodeWatch records, from a watch on every fleet node, when each first shows
// evictiond's condition and taint and when each owns nothing again.
type nodeWatch struct {
	mu              sync.Mutex
	from            time.Time
	shown, released map[string]time.Time
	armed           bool
}

func (w *nodeWatch) arm(from time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.from, w.shown, w.released, w.armed = from, map[string]time.Time{}, map[string]time.Time{}, true
}

func (w *nodeWatch) observe(n *corev1.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed {
		return
	}
	now := time.Now()
	if _, ok := w.shown[n.Name]; !ok && showsPressure(kube.ConditionMemoryPressure, kube.TaintKeyMemoryPressure)(n) {
		w.shown[n.Name] = now
	}
	if _, ok := w.shown[n.Name]; ok && ownsNothing(n) {
		if _, ok := w.released[n.Name]; !ok {
			w.released[n.Name] = now
		}
	}
}

func (w *nodeWatch) counts() (shown, released int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.shown), len(w.released)
}

// latencies: time from `from` to each node's mark, sorted.
func latencies(from time.Time, marks map[string]time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(marks))
	for _, t := range marks {
		out = append(out, t.Sub(from))
	}
	slices.Sort(out)
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))].Round(10 * time.Millisecond)
}

// procSample is a process's CPU time (in clock ticks) and resident memory.
type procSample struct {
	ticks  int64
	rssKiB int64
	at     time.Time
}

func sampleProc(b *testing.B, pid int) procSample {
	return procSample{ticks: procCPUTicks(b, pid), rssKiB: procRSSKiB(b, pid), at: time.Now()}
}

func cpuPercent(a, b procSample) float64 {
	return 100 * float64(b.ticks-a.ticks) / 100 / b.at.Sub(a.at).Seconds() // USER_HZ 100
}

// BenchmarkFleet is make bench-fleet; it prints the fleet table.
func BenchmarkFleet(b *testing.B) {
	o := fleetOptionsFromEnv(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// What deploy/ gives the agent at the API server: namespace, RBAC, the
	// admission policy and, where the chart renders them, its FlowSchema and
	// priority level.
	for _, manifest := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml", "flowcontrol.yaml"} {
		path := filepath.Join("..", "..", "deploy", manifest)
		if _, err := os.Stat(path); os.IsNotExist(err) && manifest == "flowcontrol.yaml" {
			continue
		}
		if err := env.ApplyFile(ctx, path); err != nil {
			b.Fatal(err)
		}
	}
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + fleetConfig))
	if errs != nil {
		b.Fatalf("fleet configuration: %v", errs)
	}

	// An unthrottled admin client for the set-up.
	adminCfg := rest.CopyConfig(env.Config)
	adminCfg.QPS, adminCfg.Burst = -1, 0
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	nodes := make([]string, o.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("fleet-%04d", i)
	}
	const namespaces = 20
	setupStart := time.Now()
	parallel(b, 16, o.nodes, func(i int) error {
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i], Labels: map[string]string{"evictiond.io/fleet": "true"}},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("24Gi"), corev1.ResourcePods: resource.MustParse("110")}}},
			metav1.CreateOptions{})
		return err
	})
	parallel(b, 4, namespaces, func(i int) error {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fleet-%02d", i)}}, metav1.CreateOptions{})
		return err
	})
	for i := range namespaces {
		ns := fmt.Sprintf("fleet-%02d", i)
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("no default ServiceAccount in %s within 60s", ns)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	parallel(b, 32, o.pods, func(i int) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%05d", i), Namespace: fmt.Sprintf("fleet-%02d", i%namespaces),
			Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%50)}},
			Spec: corev1.PodSpec{NodeName: nodes[i%o.nodes], Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		_, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	podsDone := time.Since(setupStart)
	// The agents' own pods and their bound tokens, as the kubelet would mount them.
	agentCfgs := make([]*rest.Config, o.nodes)
	agentUIDs := make([]types.UID, o.nodes)
	parallel(b, 16, o.nodes, func(i int) error {
		p, err := admin.CoreV1().Pods("evictiond-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "evictiond-" + nodes[i]},
			Spec: corev1.PodSpec{NodeName: nodes[i], ServiceAccountName: "evictiond", Containers: []corev1.Container{{Name: "evictiond", Image: "evictiond"}}}},
			metav1.CreateOptions{})
		if err != nil {
			return err
		}
		agentUIDs[i] = p.UID
		agentCfgs[i], err = env.ServiceAccountConfig(ctx, "evictiond-system", "evictiond",
			&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID})
		return err
	})
	b.Logf("set-up: %d nodes, %d pods in %v (%.0f pods/s); agent pods and tokens after %v",
		o.nodes, o.pods, podsDone.Round(time.Millisecond), float64(o.pods)/podsDone.Seconds(), time.Since(setupStart).Round(time.Millisecond))

	// The test's own view of the nodes.
	watch := &nodeWatch{}
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = "evictiond.io/fleet=true" }))
	nodeInf := factory.Core().V1().Nodes().Informer()
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { watch.observe(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { watch.observe(obj.(*corev1.Node)) },
	}); err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	counter := newRequestCounter()
	pressure := &atomic.Bool{}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pid := env.APIServerPID()
	before := sampleProc(b, pid)
	startAt := time.Now()
	stops := make([]func(), o.nodes)
	parallel(b, 16, o.nodes, func(i int) error {
		var err error
		stops[i], err = startFleetAgent(ctx, nodes[i], agentUIDs[i], agentCfgs[i], cfg, counter, newFleetNode(nodes[i], pressure), log.With("node", nodes[i]))
		return err
	})
	defer func() {
		parallel(b, 16, o.nodes, func(i int) error { stops[i](); return nil })
	}()
	started := time.Since(startAt)
	startCounts, startThrottled, _ := counter.snapshot()
	time.Sleep(5 * time.Second) // first passes; watches settle
	counter.snapshot()

	// Quiet.
	p0 := sampleProc(b, pid)
	time.Sleep(o.quiet)
	p1 := sampleProc(b, pid)
	quiet, quietThrottled, quietFailed := counter.snapshot()

	// Storm: every node crosses its hard threshold in the same instant.
	stormStart := time.Now()
	watch.arm(stormStart)
	pressure.Store(true)
	deadline := stormStart.Add(o.settle)
	for {
		if shown, _ := watch.counts(); shown == o.nodes || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rest := time.Until(stormStart.Add(o.storm)); rest > 0 {
		time.Sleep(rest)
	}
	pressure.Store(false)
	ended := time.Now()
	for {
		if _, released := watch.counts(); released == o.nodes || time.Now().After(ended.Add(o.settle)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // Events still being flushed
	p2 := sampleProc(b, pid)
	storm, stormThrottled, stormFailed := counter.snapshot()
	episode := time.Since(stormStart)

	watch.mu.Lock()
	shownLat, releasedLat := latencies(stormStart, watch.shown), latencies(ended, watch.released)
	watch.mu.Unlock()

	// Flapping: every node's reading crosses the threshold and back every
	// 2 s (memory hovering at the threshold), for FLEET_FLAP; then quiet
	// until every node is released again.
	flapStart := time.Now()
	watch.arm(flapStart)
	for on := true; time.Since(flapStart) < o.flap; on = !on {
		pressure.Store(on)
		time.Sleep(2 * time.Second)
	}
	pressure.Store(false)
	flapEnded := time.Now()
	for {
		if shown, released := watch.counts(); released == shown || time.Now().After(flapEnded.Add(o.settle)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	p3 := sampleProc(b, pid)
	flap, flapThrottled, flapFailed := counter.snapshot()
	flapEpisode := time.Since(flapStart)

	w := os.Stdout
	fmt.Fprintf(w, "\nFleet: %d agents, %d pods, client QPS %v burst %v (per agent), API server %s\n",
		o.nodes, o.pods, daemon.ClientQPS, daemon.ClientBurst, apiServerVersion(b))
	fmt.Fprintf(w, "start-up: %v for all agents (informers synced); requests %s, 429s %d; API server RSS %d MiB before the agents\n",
		started.Round(time.Millisecond), summarize(startCounts, 1), sum(startThrottled), before.rssKiB>>10)
	fmt.Fprintf(w, "\n%-34s %12s %12s %12s %12s %12s\n", "request (verb resource)", "quiet /s", "storm total", "storm 429s", "flap total", "flap 429s")
	keys := map[string]bool{}
	for _, m := range []map[string]int{quiet, storm, flap} {
		for k := range m {
			keys[k] = true
		}
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var quietWrites, stormWrites, flapWrites int
	for _, k := range sorted {
		fmt.Fprintf(w, "%-34s %12.3f %12d %12d %12d %12d\n", k, float64(quiet[k])/o.quiet.Seconds(), storm[k], stormThrottled[k], flap[k], flapThrottled[k])
		if isWrite(k) {
			quietWrites += quiet[k]
			stormWrites += storm[k]
			flapWrites += flap[k]
		}
	}
	fmt.Fprintf(w, "\nquiet (%v): %d writes (%.3f/s), 429s %d, failures %d; API server CPU %.1f%%, RSS %d MiB\n",
		o.quiet, quietWrites, float64(quietWrites)/o.quiet.Seconds(), sum(quietThrottled), quietFailed, cpuPercent(p0, p1), p1.rssKiB>>10)
	fmt.Fprintf(w, "storm (pressure %v, episode %v until released everywhere): %d writes = %.1f per node per episode, 429s %d, failures %d\n",
		o.storm, episode.Round(time.Second), stormWrites, float64(stormWrites)/float64(o.nodes), sum(stormThrottled), stormFailed)
	fmt.Fprintf(w, "  condition+taint shown on %d/%d nodes: p50 %v, p99 %v, max %v after the pressure began\n",
		len(shownLat), o.nodes, pct(shownLat, 0.5), pct(shownLat, 0.99), pct(shownLat, 1))
	fmt.Fprintf(w, "  released on %d/%d nodes: p50 %v, p99 %v, max %v after the pressure ended (transition period %v)\n",
		len(releasedLat), o.nodes, pct(releasedLat, 0.5), pct(releasedLat, 0.99), pct(releasedLat, 1), cfg.PressureTransitionPeriod)
	fmt.Fprintf(w, "  API server CPU %.1f%% over the episode, RSS %d MiB\n", cpuPercent(p1, p2), p2.rssKiB>>10)
	fmt.Fprintf(w, "flap (threshold crossed and back every 2 s for %v, episode %v): %d writes = %.1f per node, 429s %d, failures %d; API server CPU %.1f%%\n",
		o.flap, flapEpisode.Round(time.Second), flapWrites, float64(flapWrites)/float64(o.nodes), sum(flapThrottled), flapFailed, cpuPercent(p2, p3))
	b.ReportMetric(float64(quietWrites)/o.quiet.Seconds(), "quiet-writes/s")
	b.ReportMetric(float64(stormWrites)/float64(o.nodes), "writes/node/episode")
	b.ReportMetric(pct(shownLat, 1).Seconds(), "all-shown-s")
	b.ReportMetric(float64(sum(stormThrottled)+sum(flapThrottled)), "429s")
	b.ReportMetric(float64(flapWrites)/float64(o.nodes), "flap-writes/node")
	if len(shownLat) != o.nodes || len(releasedLat) != o.nodes {
		b.Errorf("condition and taint shown on %d and released on %d of %d nodes", len(shownLat), len(releasedLat), o.nodes)
	}
	if errs := logs.String(); strings.Count(errs, `"level":"ERROR"`) > 0 {
		b.Logf("agent errors:\n%s", firstLines(errs, 20))
	}
}

func summarize(counts map[string]int, _ int) string {
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func apiServerVersion(b *testing.B) string {
	v, err := env.Client.Discovery().ServerVersion()
	if err != nil {
		b.Fatal(err)
	}
	return v.GitVersion
}

// parallel runs fn(0..n-1) on workers goroutines; the first error fails b.
func parallel(b *testing.B, workers, n int, fn func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				mu.Lock()
				failed := firstErr != nil
				mu.Unlock()
				if i >= n || failed {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
