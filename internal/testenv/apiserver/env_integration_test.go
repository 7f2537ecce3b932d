//go:build integration

package apiserver

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

var env *Env

func TestMain(m *testing.M) {
	var err error
	env, err = Start(Options{AuditLog: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server environment:", err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

func TestServiceAccountConfigAuthenticatesAsServiceAccountWithNodeBinding(t *testing.T) {
	ctx := context.Background()
	const ns, node = "default", "sa-node"
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "agent",
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.ServiceAccountConfig(ctx, ns, "agent", &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:default:agent"; got != want {
		t.Errorf("username = %q, want %q", got, want)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != node {
		t.Errorf("extra node-name = %v, want [%s]", got, node)
	}
}

func TestAPIServerRestartKeepsStateAndReachability(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives-restart"}, Data: map[string]string{"k": "v"}}
	if _, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.StopAPIServer()
	shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := env.Client.CoreV1().ConfigMaps("default").Get(shortCtx, cm.Name, metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("GET succeeded while the API server was stopped")
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	got, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("GET after restart: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("data after restart = %v", got.Data)
	}
}

func TestSchedulerOptionSchedulesPods(t *testing.T) {
	withScheduler, err := Start(Options{Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	defer withScheduler.Stop()
	ctx := context.Background()
	client := withScheduler.Client
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "schedulable"},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = node.Status
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "to-schedule"},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && got.Spec.NodeName == "schedulable" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not scheduled within 30 s (nodeName %q, err %v); scheduler log:\n%s", got.Spec.NodeName, err, proc.Tail(withScheduler.LogPath("kube-scheduler"), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
