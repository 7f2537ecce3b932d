//go:build nodev2

package nodev2

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/testenv/podstate"
)

// evictiondNamespace is where the chart is installed.
const evictiondNamespace = "evictiond-system"

// helm runs the helm binary against the control plane.
func (n *node) helmRun(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.helm, append(args, "--kubeconfig", n.api.KubeconfigPath)...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+n.dir+"/helm-cache", "HELM_CONFIG_HOME="+n.dir+"/helm-config", "HELM_DATA_HOME="+n.dir+"/helm-data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// evictiondPod waits until the DaemonSet's pod on the node is Ready (and, when notUID is set,
// is another pod than that one) and returns it.
func (n *node) evictiondPod(t *testing.T, notUID types.UID, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := n.client.CoreV1().Pods(evictiondNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=evictiond",
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
		})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for i := range list.Items {
			p := &list.Items[i]
			last = p.Name + ": " + describeStatus(p)
			if p.UID != notUID && p.DeletionTimestamp == nil && podReady(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("evictiond's pod on %s not Ready within %v (last: %s)\n--- evictiond's log ---\n%s", nodeName, timeout, last, n.evictiondLog(t, 40))
	}
	return found
}

// evictiondLog is the tail of evictiond's container log(s) on the node.
func (n *node) evictiondLog(t *testing.T, lines int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.vm.Sh(ctx, fmt.Sprintf("for f in $(ls -tr /var/log/pods/%s_*/evictiond/*.log 2>/dev/null); do tail -n %d \"$f\"; done", evictiondNamespace, lines))
	if err != nil {
		return err.Error()
	}
	return out
}

func createNamespace(t *testing.T, n *node, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := n.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// podOnNode is a pod bound to the node that is never restarted, so its end state stays
// visible.
func podOnNode(namespace, name string, containers ...corev1.Container) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    containers,
		},
	}
}

func workloadContainer(name, workload string, args []string, requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{
		Name: name, Image: workloadImage(workload), ImagePullPolicy: corev1.PullNever, Args: args,
		Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
	}
}

func resources(kv ...string) corev1.ResourceList {
	if len(kv) == 0 {
		return nil
	}
	list := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		list[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return list
}

func (n *node) createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return created
}

// waitPod polls a pod until done says so.
func (n *node) waitPod(t *testing.T, namespace, name string, timeout time.Duration, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := n.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pod
		return done(pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: not %s within %v: %s", namespace, name, what, timeout, describeStatus(last))
	}
	return last
}

// waitPodGone polls until the pod with uid no longer exists, or has finished, and returns
// its last seen state.
func (n *node) waitPodGone(t *testing.T, namespace, name string, uid types.UID, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := n.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		if pod.UID != uid {
			return true, nil
		}
		last = pod
		return podFinished(pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s still there after %s: %s\n--- evictiond ---\n%s", namespace, name, timeout, describeStatus(last), n.evictiondLog(t, 30))
	}
	return last
}

// events lists the events of a namespace with the given reason.
func (n *node) events(t *testing.T, namespace, reason string) []corev1.Event {
	t.Helper()
	list, err := n.client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", reason).String(),
	})
	if err != nil {
		t.Fatalf("listing %s events in %s: %v", reason, namespace, err)
	}
	return list.Items
}

// waitEvents waits up to timeout for at least one event of reason in namespace.
func (n *node) waitEvents(t *testing.T, namespace, reason string, timeout time.Duration) []corev1.Event {
	t.Helper()
	var events []corev1.Event
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		events = n.events(t, namespace, reason)
		return len(events) > 0, nil
	})
	return events
}

// oomKills is the guest kernel's count of OOM kills (/proc/vmstat oom_kill).
func (n *node) oomKills(t *testing.T) int64 {
	t.Helper()
	v, err := strconv.ParseInt(n.sh(t, "awk '$1 == \"oom_kill\" {print $2}' /proc/vmstat"), 10, 64)
	if err != nil {
		t.Fatalf("reading oom_kill from the guest's /proc/vmstat: %v", err)
	}
	return v
}

// The pod state helpers are internal/testenv/podstate's, shared with the other tiers.
var (
	podReady        = podstate.Ready
	podFinished     = podstate.Finished
	describeStatus  = podstate.Describe
	terminatedState = podstate.Terminated
	describeEvents  = podstate.DescribeEvents
)

// guaranteedBystander is a Guaranteed pod that only idles. Its CPU limit is 500m:
// under TCG a 10m quota holds runc init in the pod's cgroup for minutes.
func guaranteedBystander(ns string) *corev1.Pod {
	return podOnNode(ns, "guaranteed", workloadContainer("idle", "idle", nil,
		resources("cpu", "500m", "memory", "32Mi"), resources("cpu", "500m", "memory", "32Mi")))
}

// startPods creates the pods, then waits until each is Ready.
func (n *node) startPods(t *testing.T, timeout time.Duration, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		n.createPod(t, p)
	}
	for _, p := range pods {
		n.waitPod(t, p.Namespace, p.Name, timeout, "Ready", podReady)
	}
}

// hurtBystanders returns the pods that are gone, not Ready or restarted, each
// with its status.
func (n *node) hurtBystanders(pods []*corev1.Pod) []string {
	var hurt []string
	for _, p := range pods {
		got, err := n.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			hurt = append(hurt, p.Name+": "+err.Error())
		case !podReady(got) || got.Status.ContainerStatuses[0].RestartCount != 0:
			hurt = append(hurt, p.Name+": "+describeStatus(got))
		}
	}
	return hurt
}
