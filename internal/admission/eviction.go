// Package admission is the validating webhook that holds evictiond's evictions to the
// agent's own node. RBAC grants `create pods/eviction` cluster-wide, and an admission
// policy cannot scope it: the Eviction object names the pod and nothing else, and the API
// server deletes the pod without a second admission pass. The webhook looks the pod up and
// compares its node with the node the agent's token is bound to (docs/rbac.md).
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NodeNameExtra is the user-info extra the API server sets, for a ServiceAccount token
// bound to a pod, to the node of that pod (Kubernetes 1.32+). The token is issued by the
// API server for the pod the kubelet runs, so the claim cannot be chosen by its holder.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// maxReviewBytes bounds an AdmissionReview body. An eviction's review is a few KiB (the
// user info is most of it).
const maxReviewBytes = 256 << 10

// PodGetter reads a pod from the API server (not a cache: the answer decides whether a
// pod may be evicted).
type PodGetter func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// EvictionReviewer decides AdmissionReviews of `create pods/eviction` by the agent's
// ServiceAccount.
type EvictionReviewer struct {
	// Agent is the agent's username, system:serviceaccount:<namespace>:<name>. The
	// webhook configuration sends only its requests (matchConditions); a request of any
	// other user that arrives anyway is allowed: the webhook limits the agent, nobody else.
	Agent  string
	GetPod PodGetter
	Log    *slog.Logger
}

// Review allows an eviction by the agent only if the pod it names is bound to the node
// the agent's token is bound to, and the eviction carries that pod's UID as a
// precondition. spec.nodeName cannot change once set, so with the UID the decision holds
// for the pod the API server then deletes: a pod recreated under the same name on another
// node between the lookup and the deletion has another UID, and the deletion fails.
func (r *EvictionReviewer) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.UserInfo.Username != r.Agent {
		return allow(req.UID)
	}
	if req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "eviction" || req.Operation != admissionv1.Create {
		return deny(req.UID, http.StatusForbidden, fmt.Sprintf("the evictiond eviction webhook reviews create pods/eviction only, not %s %s/%s", req.Operation, req.Resource.Resource, req.SubResource))
	}
	nodes := req.UserInfo.Extra[NodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return deny(req.UID, http.StatusForbidden, "evictiond must authenticate with a ServiceAccount token bound to its pod on a node (user info extra "+NodeNameExtra+")")
	}
	node := nodes[0]
	target := req.Namespace + "/" + req.Name

	var eviction struct {
		DeleteOptions *struct {
			Preconditions *struct {
				UID *types.UID `json:"uid"`
			} `json:"preconditions"`
		} `json:"deleteOptions"`
	}
	if err := json.Unmarshal(req.Object.Raw, &eviction); err != nil {
		return deny(req.UID, http.StatusBadRequest, fmt.Sprintf("decoding the Eviction of pod %s: %v", target, err))
	}
	if eviction.DeleteOptions == nil || eviction.DeleteOptions.Preconditions == nil || eviction.DeleteOptions.Preconditions.UID == nil {
		return deny(req.UID, http.StatusForbidden, fmt.Sprintf("evictiond on node %s must name the UID of pod %s in the eviction's deleteOptions.preconditions.uid", node, target))
	}
	wantUID := *eviction.DeleteOptions.Preconditions.UID

	pod, err := r.GetPod(ctx, req.Namespace, req.Name)
	switch {
	case apierrors.IsNotFound(err):
		return deny(req.UID, http.StatusNotFound, fmt.Sprintf("pod %s not found", target))
	case err != nil:
		r.Log.Warn("eviction review: pod lookup failed, refusing", "pod", target, "node", node, "err", err)
		return deny(req.UID, http.StatusServiceUnavailable, fmt.Sprintf("looking up pod %s: %v", target, err))
	case pod.UID != wantUID:
		return deny(req.UID, http.StatusConflict, fmt.Sprintf("pod %s has UID %s, the eviction names %s", target, pod.UID, wantUID))
	case pod.Spec.NodeName != node:
		r.Log.Warn("eviction refused: pod of another node", "pod", target, "podNode", pod.Spec.NodeName, "node", node)
		return deny(req.UID, http.StatusForbidden, fmt.Sprintf("evictiond on node %s may not evict pod %s of node %q", node, target, pod.Spec.NodeName))
	}
	return allow(req.UID)
}

func allow(uid types.UID) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: uid, Allowed: true}
}

func deny(uid types.UID, code int32, msg string) *admissionv1.AdmissionResponse {
	reason := metav1.StatusReasonForbidden
	switch code {
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusConflict:
		reason = metav1.StatusReasonConflict
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusServiceUnavailable:
		reason = metav1.StatusReasonServiceUnavailable
	}
	return &admissionv1.AdmissionResponse{UID: uid, Allowed: false,
		Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}
}

// ServeHTTP answers an admission.k8s.io/v1 AdmissionReview.
func (r *EvictionReviewer) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	if hr.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, hr.Body, maxReviewBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the AdmissionReview: %v", err), http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := r.Review(hr.Context(), review.Request)
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}
