//go:build integration

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/testenv/apiserver"
)

var env *apiserver.Env

// nodeCounter makes node and namespace names unique across tests (tests run serially).
var nodeCounter int

const (
	agentNamespace      = "evictiond-system"
	agentServiceAccount = "evictiond"
	agentUsername       = "system:serviceaccount:evictiond-system:evictiond"
)

func TestMain(m *testing.M) {
	var err error
	env, err = apiserver.Start(apiserver.Options{AuditLog: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server environment:", err)
		os.Exit(1)
	}
	code := func() int {
		ctx := context.Background()
		for _, manifest := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml"} {
			if err := env.ApplyFile(ctx, filepath.Join(repoRoot(), "deploy", manifest)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		if err := waitForAdmissionPolicy(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	env.Stop()
	os.Exit(code)
}

// waitForAdmissionPolicy waits until the API server enforces deploy/admission-policy.yaml
// (its policy store loads asynchronously): a dry-run node patch with an agent token that
// is bound to no node must be refused.
func waitForAdmissionPolicy(ctx context.Context) error {
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "admission-probe"}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating probe node: %w", err)
	}
	cfg, err := env.ServiceAccountConfig(ctx, agentNamespace, agentServiceAccount, nil)
	if err != nil {
		return err
	}
	unbound := kubernetes.NewForConfigOrDie(cfg)
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = unbound.CoreV1().Nodes().Patch(ctx, "admission-probe", types.MergePatchType,
			[]byte(`{"spec":{"taints":[{"key":"evictiond.io/probe","effect":"NoSchedule"}]}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(lastErr) && strings.Contains(lastErr.Error(), "evictiond-own-node-only"), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the admission policy to be enforced (last answer: %v): %w", lastErr, err)
	}
	return nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// testNode is a node of its own for one test, with the evictiond agent "running" on it:
// a pod of the evictiond ServiceAccount bound to the node, whose token the agent uses,
// exactly like the projected token of a DaemonSet pod.
type testNode struct {
	name      string
	namespace string // a namespace of its own for the test's workload pods
	agent     Interface
	agentCfg  *rest.Config
}

func newTestNode(t testing.TB) *testNode {
	t.Helper()
	ctx := context.Background()
	nodeCounter++
	base := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(base) > 45 {
		base = base[:45]
	}
	base = strings.TrimRight(base, "-") + "-" + strconv.Itoa(nodeCounter)
	n := &testNode{name: base, namespace: base}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node: %v", err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	// The ServiceAccount admission plugin refuses pods until the controller manager has
	// created the namespace's default ServiceAccount.
	waitFor(t, 30*time.Second, "default ServiceAccount in "+n.namespace, func() (bool, error) {
		_, err := env.Client.CoreV1().ServiceAccounts(n.namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	agentPod := createPod(t, agentNamespace, "evictiond-"+n.name, n.name, nil, func(p *corev1.Pod) {
		p.Spec.ServiceAccountName = agentServiceAccount
	})
	cfg, err := env.ServiceAccountConfig(ctx, agentNamespace, agentServiceAccount, &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.agentCfg = cfg
	if n.agent, err = NewClient(cfg); err != nil {
		t.Fatal(err)
	}
	return n
}

// startInformers starts node-scoped informers on the agent's client.
func (n *testNode) startInformers(t testing.TB, hook func(*NodeInformers)) *NodeInformers {
	t.Helper()
	inf, err := NewNodeInformers(n.agent, n.name)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(inf)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); inf.Shutdown() })
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return inf
}

// createPod creates a pod bound to node and, for pods that are not the agent, reports it
// Running and Ready (there is no kubelet in this tier), so PDBs count it as healthy.
func createPod(t testing.TB, namespace, name, node string, labels map[string]string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if mutate != nil {
		mutate(pod)
	}
	created, err := env.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", namespace, name, err)
	}
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		StartTime:  &now,
	}
	updated, err := env.Client.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("marking pod %s/%s running: %v", namespace, name, err)
	}
	return updated
}

// finishTerminatingPods does the kubelet's last step for pods of node that are being
// deleted: confirm the deletion (grace 0) once their containers would be stopped. The
// end-to-end tier runs a real kubelet; this tier has none.
func finishTerminatingPods(t testing.TB, node string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := env.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
			if err != nil {
				return false, nil
			}
			zero := int64(0)
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					_ = env.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
			return false, nil
		})
	}()
}

func candidateFor(pod *corev1.Pod, hard bool) Candidate {
	grace := int64(30)
	if hard {
		grace = 1
	}
	return Candidate{
		Pod: pod, Signal: policy.SignalMemoryAvailable, Hard: hard, GracePeriodSeconds: grace,
		Message:         "The node was low on resource: memory. Threshold quantity: 500Mi, available: 300Mi. Container app was using 800Mi, request is 100Mi, has larger consumption of memory. ",
		Annotations:     map[string]string{"offending_containers": "app", "offending_containers_usage": "800Mi", "starved_resource": "memory"},
		Reason:          "exceeds memory request; priority 0",
		ExpectedReclaim: 800 << 20,
	}
}

// waitFor polls cond every 50 ms up to timeout and fails the test with what when it
// never holds.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// eventsFor lists Events whose involved object has the given kind and name.
func eventsFor(t testing.TB, namespace, kind, name string) []corev1.Event {
	t.Helper()
	list, err := env.Client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func waitForEvent(t testing.TB, namespace, kind, name, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	waitFor(t, 15*time.Second, fmt.Sprintf("Event %s on %s %s/%s", reason, kind, namespace, name), func() (bool, error) {
		for _, e := range eventsFor(t, namespace, kind, name) {
			if e.Reason == reason {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// pdbFor creates a PDB over pods labelled app=<app> and waits until the disruption
// controller has computed its status.
func pdbFor(t testing.TB, namespace, app string, minAvailable int) {
	t.Helper()
	ctx := context.Background()
	if err := createPDB(ctx, namespace, app, minAvailable); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "PDB status from the disruption controller", func() (bool, error) {
		pdb, err := env.Client.PolicyV1().PodDisruptionBudgets(namespace).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.ExpectedPods > 0, nil
	})
}

// auditWrites counts the audit log's write requests (create, update, patch, delete) by
// username since offset, and returns the new offset.
func auditWrites(t testing.TB, username string, offset int64) (int, []string, int64) {
	t.Helper()
	data, err := os.ReadFile(env.AuditLogPath)
	if err != nil {
		t.Fatal(err)
	}
	if offset > int64(len(data)) {
		offset = 0
	}
	count := 0
	var seen []string
	for _, line := range strings.Split(string(data[offset:]), "\n") {
		if line == "" {
			continue
		}
		var ev struct {
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
			Stage      string `json:"stage"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			continue
		}
		if ev.User.Username != username || ev.Stage != "ResponseComplete" {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			count++
			seen = append(seen, ev.Verb+" "+ev.RequestURI)
		}
	}
	return count, seen, int64(len(data))
}

// testLogger writes to stderr (goroutines of the code under test may still log briefly
// after a test ends, which t.Log would turn into a panic), at Warn level unless
// EVICTIOND_TEST_LOG=debug|info asks for more.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("EVICTIOND_TEST_LOG")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test", t.Name())
}

func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

func createPDB(ctx context.Context, namespace, app string, minAvailable int) error {
	min := intstr.FromInt32(int32(minAvailable))
	_, err := env.Client.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &min,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{})
	return err
}
