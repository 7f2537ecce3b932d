//go:build e2e

package e2e_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// otherNode is a Node object with no kubelet: the second node whose identity the test
// borrows.
const otherNode = "evictiond-e2e-other"

// testEvictionsHeldToTheAgentsNode proves the eviction webhook of the deployed chart
// (docs/rbac.md): with a ServiceAccount token the API server bound to an evictiond pod
// on another node, the agent's identity cannot evict a pod of this node; with a token
// bound to the agent's pod on this node it can; with the webhook down the agent's
// evictions fail closed while everyone else's still pass.
func testEvictionsHeldToTheAgentsNode(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	const ns = "e2e-own-node"
	createNamespace(t, c.Client, ns)

	// The second node and an agent pod bound to it: never run (no kubelet), but the
	// API server binds a token to it and puts its node in the token's user info.
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: otherNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", otherNode, err)
	}
	t.Cleanup(func() { removeNodeAndItsPods(t, c.Client, otherNode) })
	remoteAgent, err := c.Client.CoreV1().Pods(cluster.EvictiondNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "evictiond-on-other-node"},
		Spec: corev1.PodSpec{
			NodeName:           otherNode,
			ServiceAccountName: cluster.EvictiondDaemonSet,
			Containers:         []corev1.Container{{Name: "evictiond", Image: cluster.EvictiondImage}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating an agent pod on %s: %v", otherNode, err)
	}
	localAgent, err := c.EvictiondPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	remote := agentClient(t, c, remoteAgent)
	local := agentClient(t, c, localAgent)

	victim := podOnNode(ns, "victim", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil))
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim = waitPod(t, c, ns, "victim", time.Minute, "Ready", podReady)
	evict := func(client kubernetes.Interface, pod *corev1.Pod, withUID bool) error {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
		if withUID {
			ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
		}
		return client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, ev)
	}
	mustRefuse := func(what string, err error, code int32, wantMsg ...string) {
		t.Helper()
		var status apierrors.APIStatus
		if err == nil || !errors.As(err, &status) || status.Status().Code != code {
			t.Errorf("%s: err = %v, want HTTP %d", what, err, code)
			return
		}
		for _, m := range wantMsg {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: %q does not say %q", what, err, m)
			}
		}
	}

	mustRefuse("the other node's agent evicts a pod of this node", evict(remote, victim, true), 403,
		"evictiond on node "+otherNode+" may not evict pod "+ns+"/victim", `of node "`+cluster.NodeName+`"`)
	mustRefuse("an eviction without the pod's UID", evict(local, victim, false), 403, "preconditions.uid")
	if got, err := c.Client.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil || got.UID != victim.UID {
		t.Fatalf("victim after the refused evictions: %v, deletion %v; want it untouched", err, got.DeletionTimestamp)
	}

	// Fail closed, for the agent alone: no replica, no eviction by the agent, while the
	// admin's eviction is not sent to the webhook at all.
	replicas := scaleWebhook(t, c, 0)
	mustRefuse("the agent evicts while no webhook replica answers", evict(local, victim, true), 500, "own-node-evictions.evictiond.io")
	bystander := podOnNode(ns, "bystander", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil))
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, bystander, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bystander = waitPod(t, c, ns, "bystander", time.Minute, "Ready", podReady)
	if err := evict(c.Client, bystander, false); err != nil {
		t.Errorf("an admin's eviction while the webhook is down: %v; want it unaffected (matchConditions)", err)
	}
	scaleWebhook(t, c, replicas)

	if err := evict(local, victim, true); err != nil {
		t.Fatalf("the agent on %s evicts a pod of its node: %v", cluster.NodeName, err)
	}
	waitPod(t, c, ns, "victim", 30*time.Second, "terminating", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// agentClient is a client with a token of the agent's ServiceAccount bound to pod, as
// the kubelet would mount in it.
func agentClient(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(cluster.EvictiondNamespace).CreateToken(context.Background(), cluster.EvictiondDaemonSet, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to pod %s: %v", pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfigOrDie(cfg)
}

// scaleWebhook sets the webhook's replicas and waits until that many are Ready (and, at 0,
// until none is left to answer). It returns the replicas it had.
func scaleWebhook(t *testing.T, c *cluster.Cluster, replicas int32) int32 {
	t.Helper()
	ctx := context.Background()
	scale, err := c.Client.AppsV1().Deployments(cluster.EvictiondNamespace).GetScale(ctx, cluster.EvictionWebhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	had := scale.Spec.Replicas
	scale.Spec.Replicas = replicas
	if _, err := c.Client.AppsV1().Deployments(cluster.EvictiondNamespace).UpdateScale(ctx, cluster.EvictionWebhook, scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var why string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if replicas > 0 {
			var ok bool
			ok, why = c.EvictionWebhookReady(ctx)
			return ok, nil
		}
		pods, err := c.Client.CoreV1().Pods(cluster.EvictiondNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + cluster.EvictionWebhook})
		if err != nil {
			return false, nil
		}
		why = "webhook pods left: " + strconv.Itoa(len(pods.Items))
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("eviction webhook at %d replicas: %v (%s)", replicas, err, why)
	}
	return had
}

// removeNodeAndItsPods deletes a node that has no kubelet and the pods bound to it (the
// DaemonSet's included): nothing else would finish them.
func removeNodeAndItsPods(t *testing.T, client kubernetes.Interface, node string) {
	ctx := context.Background()
	if err := client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting node %s: %v", node, err)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		t.Errorf("listing the pods of %s: %v", node, err)
		return
	}
	for _, p := range pods.Items {
		if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting pod %s/%s of %s: %v", p.Namespace, p.Name, node, err)
		}
	}
}
