//go:build integration

package kube

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// TestWorkloadRefs_DeploymentUIDReadWithTheAgentsRights reads a Deployment's
// UID as the agent does (its ServiceAccount with deploy/'s ClusterRole, through
// kube.Client, which builds no apps/v1 client), and names a missing one
// without a UID and with an error saying why.
func TestWorkloadRefsReadsTheDeploymentUIDWithTheAgentsRights(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d, err := env.Client.AppsV1().Deployments(n.namespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: n.namespace},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient(n.agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	refs := WorkloadRefs{Client: client}
	ref, err := refs.Reference(ctx, policy.Workload{Kind: policy.WorkloadDeployment, APIVersion: "apps/v1", Namespace: n.namespace, Name: "web"})
	if err != nil || ref.UID != d.UID || ref.Kind != "Deployment" || ref.Name != "web" || ref.Namespace != n.namespace {
		t.Fatalf("Reference = %+v, %v; want Deployment %s/web with UID %s", ref, err, n.namespace, d.UID)
	}
	ref, err = refs.Reference(ctx, policy.Workload{Kind: policy.WorkloadDeployment, APIVersion: "apps/v1", Namespace: n.namespace, Name: "gone"})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "deployment "+n.namespace+"/gone") || ref.UID != "" || ref.Name != "gone" {
		t.Errorf("missing deployment: %+v, %v; want a reference without UID and a not-found error", ref, err)
	}
	// A StatefulSet's UID is its pods' owner reference: no read.
	ref, err = WorkloadRefs{}.Reference(ctx, policy.Workload{Kind: policy.WorkloadStatefulSet, Namespace: "ns", Name: "db", UID: "db-uid"})
	if err != nil || ref.UID != "db-uid" {
		t.Errorf("statefulset: %+v, %v", ref, err)
	}
}
