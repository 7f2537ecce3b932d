package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

const agent = "system:serviceaccount:evictiond-system:evictiond"

func testReviewer(pods ...*corev1.Pod) *EvictionReviewer {
	return &EvictionReviewer{Agent: agent, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		GetPod: func(_ context.Context, namespace, name string) (*corev1.Pod, error) {
			for _, p := range pods {
				if p.Namespace == namespace && p.Name == name {
					return p, nil
				}
			}
			if name == "broken" {
				return nil, errors.New("connection refused")
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
		}}
}

func evictionRequest(user string, node []string, namespace, name string, uid *types.UID) *admissionv1.AdmissionRequest {
	ev := policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if uid != nil {
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: uid}}
	}
	raw, _ := json.Marshal(ev)
	extra := map[string]authenticationv1.ExtraValue{}
	if node != nil {
		extra[NodeNameExtra] = node
	}
	return &admissionv1.AdmissionRequest{
		UID:         "req-1",
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource: "eviction",
		Operation:   admissionv1.Create,
		Namespace:   namespace,
		Name:        name,
		UserInfo:    authenticationv1.UserInfo{Username: user, Extra: extra},
		Object:      runtime.RawExtension{Raw: raw},
	}
}

func TestEvictionReview(t *testing.T) {
	local := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "local", UID: "uid-local"}, Spec: corev1.PodSpec{NodeName: "node-a"}}
	remote := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "remote", UID: "uid-remote"}, Spec: corev1.PodSpec{NodeName: "node-b"}}
	r := testReviewer(local, remote)
	uid := func(s string) *types.UID { u := types.UID(s); return &u }
	nodeA := []string{"node-a"}

	for _, tc := range []struct {
		name    string
		req     *admissionv1.AdmissionRequest
		allowed bool
		code    int32
		msg     string
	}{
		{"own node's pod", evictionRequest(agent, nodeA, "app", "local", uid("uid-local")), true, 0, ""},
		{"another node's pod", evictionRequest(agent, nodeA, "app", "remote", uid("uid-remote")), false, 403, `evictiond on node node-a may not evict pod app/remote of node "node-b"`},
		{"unscheduled pod", evictionRequest(agent, []string{""}, "app", "local", uid("uid-local")), false, 403, "token bound to its pod on a node"},
		{"token bound to no node", evictionRequest(agent, nil, "app", "local", uid("uid-local")), false, 403, "token bound to its pod on a node"},
		{"two node claims", evictionRequest(agent, []string{"node-a", "node-b"}, "app", "local", uid("uid-local")), false, 403, "token bound to its pod on a node"},
		{"no UID precondition", evictionRequest(agent, nodeA, "app", "local", nil), false, 403, "deleteOptions.preconditions.uid"},
		{"UID of another pod", evictionRequest(agent, nodeA, "app", "local", uid("uid-old")), false, 409, "has UID uid-local, the eviction names uid-old"},
		{"pod gone", evictionRequest(agent, nodeA, "app", "gone", uid("x")), false, 404, "pod app/gone not found"},
		{"lookup fails: closed", evictionRequest(agent, nodeA, "app", "broken", uid("x")), false, 503, "connection refused"},
		{"another user is not reviewed", evictionRequest("system:serviceaccount:kube-system:drainer", nil, "app", "remote", nil), true, 0, ""},
		{"the agent's other requests are not this webhook's", func() *admissionv1.AdmissionRequest {
			req := evictionRequest(agent, nodeA, "app", "local", uid("uid-local"))
			req.SubResource = ""
			req.Operation = admissionv1.Delete
			return req
		}(), false, 403, "reviews create pods/eviction only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.Review(context.Background(), tc.req)
			if resp.UID != tc.req.UID {
				t.Errorf("response UID %q, want the request's %q", resp.UID, tc.req.UID)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if tc.allowed {
				return
			}
			if resp.Result.Code != tc.code || !strings.Contains(resp.Result.Message, tc.msg) {
				t.Errorf("result %d %q, want %d containing %q", resp.Result.Code, resp.Result.Message, tc.code, tc.msg)
			}
		})
	}
}

func TestEvictionReviewOverHTTP(t *testing.T) {
	local := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "local", UID: "uid-local"}, Spec: corev1.PodSpec{NodeName: "node-b"}}
	srv := httptest.NewServer(testReviewer(local))
	defer srv.Close()
	u := types.UID("uid-local")
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  evictionRequest(agent, []string{"node-a"}, "app", "local", &u)})
	resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "AdmissionReview" || got.APIVersion != "admission.k8s.io/v1" || got.Response == nil || got.Response.UID != "req-1" || got.Response.Allowed {
		t.Errorf("review answer %+v, want an admission.k8s.io/v1 AdmissionReview refusing req-1", got)
	}

	big := bytes.Repeat([]byte("x"), maxReviewBytes+1)
	resp2, err := http.Post(srv.URL, "application/json", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: status %d, want 413", resp2.StatusCode)
	}
}
