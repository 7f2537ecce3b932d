//go:build integration

// Package apf_test proves deploy/flowcontrol.yaml against a real kube-apiserver with API
// Priority and Fairness on: while the request loops of many workloads' ServiceAccounts
// saturate the priority level ServiceAccounts fall into (workload-low), the agent's
// evictions wait there for their fair turn without the FlowSchema; with it they are
// classified into evictiond's own level and dispatched as they arrive.
package apf_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/evictiond/evictiond/internal/testenv/apiserver"
)

var env *apiserver.Env

// A small server: 10 + 5 seats shared by all priority levels (a default server has 600),
// so a few dozen request loops saturate workload-low on a two-core machine.
var apfArgs = []string{"--enable-priority-and-fairness=true", "--max-requests-inflight=10", "--max-mutating-requests-inflight=5"}

const (
	agentNamespace = "evictiond-system"
	agentSA        = "evictiond"
	tenant         = "apf-tenant" // the competing workloads' namespace
	tenants        = 40           // workloads, each a ServiceAccount of its own: a flow of its own in APF
	victims        = "apf-victims"
	nodeName       = "apf-node"
)

func TestMain(m *testing.M) {
	var err error
	env, err = apiserver.Start(apiserver.Options{ExtraAPIServerArgs: apfArgs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server environment:", err)
		os.Exit(1)
	}
	code := func() int {
		for _, manifest := range []string{"namespace.yaml", "rbac.yaml"} {
			if err := env.ApplyFile(context.Background(), deployFile(manifest)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return m.Run()
	}()
	env.Stop()
	os.Exit(code)
}

func deployFile(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", name)
}

func TestEvictionsBypassSaturatedWorkloadLevelWithTheFlowSchema(t *testing.T) {
	ctx := context.Background()
	setUpTenant(t)
	must(t, errOf(env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: victims}}, metav1.CreateOptions{})))
	must(t, errOf(env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})))
	waitFor(t, "default ServiceAccount in "+victims, func(ctx context.Context) bool {
		_, err := env.Client.CoreV1().ServiceAccounts(victims).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	agentCfg, err := env.ServiceAccountConfig(ctx, agentNamespace, agentSA, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := &classifications{}
	agentCfg.Wrap(seen.wrap)
	agent := kubernetes.NewForConfigOrDie(agentCfg)

	workloadLow := plcUID(t, "workload-low")
	load := startLoad(t)
	defer load.stop()
	start := apfCounts(t)
	waitFor(t, "the tenants' requests to wait in workload-low", func(context.Context) bool {
		return apfCounts(t).waitedLong["workload-low"] > start.waitedLong["workload-low"]
	})

	const evictions = 15
	before := apfCounts(t)
	without := evictPods(t, agent, seen, "without", evictions)
	afterWithout := apfCounts(t)

	if err := env.ApplyFile(ctx, deployFile("flowcontrol.yaml")); err != nil {
		t.Fatal(err)
	}
	evictiondPL, evictiondFS := plcUID(t, "evictiond"), fsUID(t, "evictiond")
	// The API server's APF controller picks the objects up asynchronously: a dry-run
	// status patch (a write the FlowSchema matches) shows when it classifies by them.
	waitFor(t, "the agent's writes classified by FlowSchema evictiond", func(ctx context.Context) bool {
		_, err := agent.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(`{"status":{"conditions":[]}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err == nil && seen.last("/status").priorityLevel == string(evictiondPL)
	})
	beforeWith := apfCounts(t)
	with := evictPods(t, agent, seen, "with", evictions)
	after := apfCounts(t)
	served, rejected := load.stop()

	t.Logf("competing load: %d LIST requests served, %d rejected (429), from %d ServiceAccounts of namespace %s", served, rejected, tenants, tenant)
	t.Logf("eviction latency under the competing load, without the FlowSchema: %s", without.summary())
	t.Logf("eviction latency under the competing load, with the FlowSchema:    %s", with.summary())

	// Without: the agent is a ServiceAccount like any other, in the saturated level.
	for _, c := range without.classes {
		if c.priorityLevel != string(workloadLow) {
			t.Errorf("without the FlowSchema an eviction was classified into priority level %s, want workload-low (%s)", c.priorityLevel, workloadLow)
			break
		}
	}
	if d := afterWithout.waitedLong["workload-low"] - before.waitedLong["workload-low"]; d == 0 {
		t.Errorf("no request waited over %v in workload-low during the evictions without the FlowSchema: the level was not saturated", longWait)
	}
	// With: every eviction in evictiond's level, dispatched as it arrived and none
	// rejected, while workload-low stays saturated.
	for _, c := range with.classes {
		if c.priorityLevel != string(evictiondPL) || c.flowSchema != string(evictiondFS) {
			t.Errorf("with the FlowSchema an eviction was classified as flow schema %s / priority level %s, want evictiond (%s / %s)",
				c.flowSchema, c.priorityLevel, evictiondFS, evictiondPL)
			break
		}
	}
	if with.failed > 0 {
		t.Errorf("with the FlowSchema %d of %d evictions failed", with.failed, evictions)
	}
	if d := after.dispatched["evictiond"] - beforeWith.dispatched["evictiond"]; d < evictions {
		t.Errorf("priority level evictiond dispatched %v requests during the evictions, want at least %d", d, evictions)
	}
	if d := after.waited["evictiond"] - beforeWith.waited["evictiond"]; d != 0 {
		t.Errorf("%v of the agent's requests waited over %v in evictiond's queues (APF's measurement); want none: nothing else uses the level", d, noWait)
	}
	if d := after.rejected["evictiond"] - beforeWith.rejected["evictiond"]; d != 0 {
		t.Errorf("%v of the agent's requests were rejected by priority level evictiond", d)
	}
	if d := after.waitedLong["workload-low"] - beforeWith.waitedLong["workload-low"]; d == 0 {
		t.Errorf("no request waited over %v in workload-low during the evictions with the FlowSchema: the level was not saturated", longWait)
	}
}

// setUpTenant creates the competing workloads: ServiceAccounts allowed to list the
// ConfigMaps of their namespace, which holds enough of them that each list takes a while.
func setUpTenant(t *testing.T) {
	ctx := context.Background()
	must(t, errOf(env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{})))
	for i := range tenants {
		must(t, errOf(env.Client.CoreV1().ServiceAccounts(tenant).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tenantName(i)}}, metav1.CreateOptions{})))
	}
	must(t, errOf(env.Client.RbacV1().Roles(tenant).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "list-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{})))
	must(t, errOf(env.Client.RbacV1().RoleBindings(tenant).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "list-configmaps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "list-configmaps"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + tenant}}}, metav1.CreateOptions{})))
	value := strings.Repeat("x", 16<<10)
	for i := range 200 {
		must(t, errOf(env.Client.CoreV1().ConfigMaps(tenant).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"v": value}}, metav1.CreateOptions{})))
	}
}

func tenantName(i int) string { return fmt.Sprintf("workload-%02d", i) }

// load is the tenants' bounded request loops: each lists the namespace's ConfigMaps
// (3.2 MB) again and again until stopped, on loopback against the test API server only.
type load struct {
	cancel             context.CancelFunc
	wg                 sync.WaitGroup
	served, rejected   atomic.Int64
	stopped            bool
	servedN, rejectedN int64
}

func startLoad(t *testing.T) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for i := range tenants {
		cfg, err := env.ServiceAccountConfig(context.Background(), tenant, tenantName(i), nil)
		if err != nil {
			l.stop()
			t.Fatal(err)
		}
		tr, err := rest.TransportFor(cfg) // no client-side rate limit or retries: raw pressure
		if err != nil {
			l.stop()
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr, Timeout: time.Minute}
		url := cfg.Host + "/api/v1/namespaces/" + tenant + "/configmaps"
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					l.served.Add(1)
				case http.StatusTooManyRequests:
					l.rejected.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *load) stop() (served, rejected int64) {
	if !l.stopped {
		l.stopped = true
		l.cancel()
		l.wg.Wait()
		l.servedN, l.rejectedN = l.served.Load(), l.rejected.Load()
	}
	return l.servedN, l.rejectedN
}

// classifications records the APF response headers of the agent's requests.
type classifications struct {
	mu     sync.Mutex
	byPath map[string]class
}

type class struct{ flowSchema, priorityLevel string }

func (c *classifications) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.mu.Lock()
			if c.byPath == nil {
				c.byPath = map[string]class{}
			}
			c.byPath[req.URL.Path] = class{
				flowSchema:    resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID),
				priorityLevel: resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID),
			}
			c.mu.Unlock()
		}
		return resp, err
	})
}

// last returns the classification of the last request whose path ends with suffix.
func (c *classifications) last(suffix string) class {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, cl := range c.byPath {
		if strings.HasSuffix(p, suffix) {
			return cl
		}
	}
	return class{}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type evictionRun struct {
	latencies []time.Duration
	classes   []class
	failed    int
}

func (r evictionRun) summary() string {
	if len(r.latencies) == 0 {
		return "no evictions"
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	return fmt.Sprintf("n=%d min=%v median=%v p90=%v max=%v failed=%d", len(s), s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond),
		s[len(s)*9/10].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), r.failed)
}

// evictPods creates n pods (as admin, exempt from APF) and evicts them one by one with the
// agent's client, as the evictor does, timing each eviction call.
func evictPods(t *testing.T, agent kubernetes.Interface, seen *classifications, phase string, n int) evictionRun {
	ctx := context.Background()
	var run evictionRun
	for i := range n {
		name := fmt.Sprintf("%s-%02d", phase, i)
		pod, err := env.Client.CoreV1().Pods(victims).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		start := time.Now()
		err = agent.PolicyV1().Evictions(victims).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: victims},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}})
		run.latencies = append(run.latencies, time.Since(start))
		if err != nil {
			run.failed++
			t.Logf("%s the FlowSchema: evicting %s: %v", phase, name, err)
		}
		run.classes = append(run.classes, seen.last("/pods/"+name+"/eviction"))
	}
	return run
}

// What APF's own wait measurement (apiserver_flowcontrol_request_wait_duration_seconds,
// from arrival in the priority level to dispatch) calls no wait and a long one: bucket
// bounds of that histogram, far apart.
const (
	noWait   = 20 * time.Millisecond
	longWait = 200 * time.Millisecond
)

// apfState is the API server's APF counters by priority level.
type apfState struct {
	// waited and waitedLong count dispatched requests that waited longer than noWait and
	// longWait.
	waited, waitedLong   map[string]float64
	dispatched, rejected map[string]float64
}

func apfCounts(t *testing.T) apfState {
	t.Helper()
	raw, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the API server's /metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing the API server's /metrics: %v", err)
	}
	byLevel := func(name string, value func(*dto.Metric) float64) map[string]float64 {
		out := map[string]float64{}
		if f := families[name]; f != nil {
			for _, m := range f.Metric {
				level, executed := "", true
				for _, l := range m.Label {
					switch l.GetName() {
					case "priority_level":
						level = l.GetValue()
					case "execute":
						executed = l.GetValue() == "true"
					}
				}
				if level != "" && executed {
					out[level] += value(m)
				}
			}
		}
		return out
	}
	longerThan := func(d time.Duration) func(*dto.Metric) float64 {
		return func(m *dto.Metric) float64 {
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == d.Seconds() {
					return float64(h.GetSampleCount() - b.GetCumulativeCount())
				}
			}
			t.Fatalf("apiserver_flowcontrol_request_wait_duration_seconds has no bucket %v", d)
			return 0
		}
	}
	counter := func(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
	const wait = "apiserver_flowcontrol_request_wait_duration_seconds"
	return apfState{
		waited:     byLevel(wait, longerThan(noWait)),
		waitedLong: byLevel(wait, longerThan(longWait)),
		dispatched: byLevel("apiserver_flowcontrol_dispatched_requests_total", counter),
		rejected:   byLevel("apiserver_flowcontrol_rejected_requests_total", counter),
	}
}

func plcUID(t *testing.T, name string) types.UID {
	t.Helper()
	plc, err := env.Client.FlowcontrolV1().PriorityLevelConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("priority level %s: %v", name, err)
	}
	return plc.UID
}

func fsUID(t *testing.T, name string) types.UID {
	t.Helper()
	fs, err := env.Client.FlowcontrolV1().FlowSchemas().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("flow schema %s: %v", name, err)
	}
	return fs.UID
}

func waitFor(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func errOf[T any](_ T, err error) error { return err }
