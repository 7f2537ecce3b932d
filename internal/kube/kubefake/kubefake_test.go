package kubefake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
)

func pod(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}}
}

func newClientset(t *testing.T, objs ...runtime.Object) *Clientset {
	t.Helper()
	c, err := NewClientset(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// podsOf is the fake's pods client with every verb the store answers (kube.PodInterface
// has those evictiond uses).
func podsOf(c *Clientset, namespace string) listResource[*corev1.Pod, *corev1.PodList] {
	return c.CoreV1().Pods(namespace).(listResource[*corev1.Pod, *corev1.PodList])
}

type seen struct {
	typ  watch.EventType
	name string
	rv   string
}

func (s seen) String() string { return fmt.Sprintf("%s %s@%s", s.typ, s.name, s.rv) }

// next is the watch's next n events, or a failure after a second without one.
func next(t *testing.T, w watch.Interface, n int) []seen {
	t.Helper()
	var out []seen
	for range n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", out)
			}
			p := e.Object.(*corev1.Pod)
			out = append(out, seen{e.Type, p.Name, p.ResourceVersion})
		case <-time.After(time.Second):
			t.Fatalf("no event after %v", out)
		}
	}
	return out
}

func quiet(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case e := <-w.ResultChan():
		t.Fatalf("unexpected event %s %s", e.Type, e.Object.(*corev1.Pod).Name)
	case <-time.After(50 * time.Millisecond):
	}
}

func equal(t *testing.T, what string, got, want []seen) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// A watch from a list's resourceVersion sees every later write once, in order, each at
// the resourceVersion the write returned, as a reflector needs.
func TestWatchDeliversWritesInOrderAtTheirResourceVersions(t *testing.T) {
	ctx := t.Context()
	c := newClientset(t, pod("a", "n1", nil))
	pods := podsOf(c, "default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.ResourceVersion != "1" || list.Items[0].ResourceVersion != "1" {
		t.Fatalf("list: %d pods at %q (pod at %q); want pod a and resourceVersion 1", len(list.Items), list.ResourceVersion, list.Items[0].ResourceVersion)
	}
	w, err := c.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	b, err := pods.Create(ctx, pod("b", "n1", nil), metav1.CreateOptions{})
	if err != nil || b.ResourceVersion != "2" {
		t.Fatalf("create of b: at %q, %v; want resourceVersion 2", b.ResourceVersion, err)
	}
	a := list.Items[0].DeepCopy()
	a.Labels = map[string]string{"x": "1"}
	a, err = pods.Update(ctx, a, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err = pods.Patch(ctx, "b", types.MergePatchType, []byte(`{"metadata":{"labels":{"y":"2"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Labels["y"] != "2" {
		t.Errorf("patched pod b's labels %v; want y=2", b.Labels)
	}
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	equal(t, "watch", next(t, w, 4), []seen{{watch.Added, "b", "2"}, {watch.Modified, "a", a.ResourceVersion},
		{watch.Modified, "b", b.ResourceVersion}, {watch.Deleted, "a", "5"}})
	quiet(t, w)
	if _, err := pods.Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get of a deleted pod: %v; want NotFound", err)
	}
	// A stale resourceVersion in an update is the API server's 409.
	stale := list.Items[0].DeepCopy()
	stale.Name = "b"
	if _, err := pods.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update at a stale resourceVersion: %v; want Conflict", err)
	}
}

// Selectors narrow lists and watches as the API server's do: a pod that stops
// matching is DELETED for the watch, one that starts, ADDED; a watch from an older
// resourceVersion replays what it missed; one from before the history is 410 Gone.
func TestSelectorsAndResourceVersionsOfWatches(t *testing.T) {
	ctx := t.Context()
	c := newClientset(t, pod("a", "n1", map[string]string{"app": "web"}), pod("b", "n2", map[string]string{"app": "web"}))
	pods := c.CoreV1().Pods("")
	onN1 := metav1.ListOptions{FieldSelector: "spec.nodeName=n1", LabelSelector: "app=web"}
	list, err := pods.List(ctx, onN1)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Fatalf("pods on n1: %v; want a", list.Items)
	}
	if _, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "status.hostIP=10.0.0.1"}); !apierrors.IsBadRequest(err) {
		t.Errorf("a field the fake does not select by: %v; want BadRequest", err)
	}
	// Without a resourceVersion: the selected pods first.
	all, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	equal(t, "watch without a resourceVersion", next(t, all, 1), []seen{{watch.Added, "a", "1"}})
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: onN1.FieldSelector, LabelSelector: onN1.LabelSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	relabel := func(name, app string) string {
		p, err := podsOf(c, "default").Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"`+app+`"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.ResourceVersion
	}
	out := relabel("a", "db")
	in := relabel("a", "web")
	relabel("b", "db") // on n2: never seen
	equal(t, "selected watch", next(t, w, 2), []seen{{watch.Deleted, "a", out}, {watch.Added, "a", in}})
	quiet(t, w)
	// The same writes again, for a watch opened after them from the list's version.
	late, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: onN1.FieldSelector, LabelSelector: onN1.LabelSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Stop()
	equal(t, "watch from an older resourceVersion", next(t, late, 2), []seen{{watch.Deleted, "a", out}, {watch.Added, "a", in}})
	for i := range historyLength {
		relabel("b", strconv.Itoa(i))
	}
	if _, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion}); !apierrors.IsResourceExpired(err) {
		t.Errorf("watch from before the history: %v; want 410 Gone (expired)", err)
	}
	// A watch ends with its context, as one over HTTP does.
	wctx, cancel := context.WithCancel(ctx)
	ended, err := pods.Watch(wctx, metav1.ListOptions{ResourceVersion: strconv.Itoa(historyLength + 10)})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, ok := <-ended.ResultChan():
		if ok {
			t.Error("an event after the watch's context ended")
		}
	case <-time.After(time.Second):
		t.Error("the watch did not end with its context")
	}
}

// The node status's strategic merge patch of its conditions, and the event
// correlator's, come out as apimachinery's strategicpatch makes them.
func TestStrategicMergePatchAgreesWithApimachinery(t *testing.T) {
	ctx := t.Context()
	now := metav1.NewTime(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "1"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"}}}}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "n1.1"}, Count: 1, Message: "one",
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	c := newClientset(t, node, event)
	later := metav1.NewTime(now.Add(time.Minute))
	conditions, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "EvictiondMemoryPressure", LastTransitionTime: later},
		{Type: "EvictiondDiskPressure", Status: corev1.ConditionFalse, Reason: "EvictiondNoPressure"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		patch    []byte
		obj, got func() (runtime.Object, error)
	}{
		{"node conditions", conditions, func() (runtime.Object, error) { return node, nil }, func() (runtime.Object, error) {
			return c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, conditions, metav1.PatchOptions{}, "status")
		}},
		{"node labels and taints", []byte(`{"metadata":{"labels":{"a":null,"b":"2"}},"spec":{"taints":[{"key":"evictiond","effect":"NoSchedule"}]}}`),
			func() (runtime.Object, error) { return node, nil }, func() (runtime.Object, error) {
				return c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType,
					[]byte(`{"metadata":{"labels":{"a":null,"b":"2"}},"spec":{"taints":[{"key":"evictiond","effect":"NoSchedule"}]}}`), metav1.PatchOptions{})
			}},
		{"event repeat", []byte(`{"count":2,"lastTimestamp":"2026-11-26T10:01:00Z","message":"two"}`),
			func() (runtime.Object, error) { return event, nil }, func() (runtime.Object, error) {
				return c.CoreV1().Events("default").Patch(ctx, "n1.1", types.StrategicMergePatchType,
					[]byte(`{"count":2,"lastTimestamp":"2026-11-26T10:01:00Z","message":"two"}`), metav1.PatchOptions{})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := tc.obj()
			resource, _ := resourceOf(before)
			m, _ := before.(interface{ GetName() string })
			stored, err := c.Store().Get(resource, map[string]string{"events": "default"}[resource], m.GetName())
			if err != nil {
				t.Fatal(err)
			}
			original, _ := json.Marshal(stored)
			wantJSON, err := strategicpatch.StrategicMergePatch(original, tc.patch, stored)
			if err != nil {
				t.Fatal(err)
			}
			want := reflect.New(reflect.TypeOf(stored).Elem()).Interface().(runtime.Object)
			if err := json.Unmarshal(wantJSON, want); err != nil {
				t.Fatal(err)
			}
			got, err := tc.got()
			if err != nil {
				t.Fatal(err)
			}
			// The resourceVersion is the write's: the rest is the patch's.
			gotJSON, _ := json.Marshal(got)
			var g, w map[string]any
			_ = json.Unmarshal(gotJSON, &g)
			wantJSON, _ = json.Marshal(want)
			_ = json.Unmarshal(wantJSON, &w)
			delete(g["metadata"].(map[string]any), "resourceVersion")
			delete(w["metadata"].(map[string]any), "resourceVersion")
			if gs, ws := fmt.Sprint(g), fmt.Sprint(w); gs != ws {
				t.Errorf("patched:\n%s\nstrategicpatch:\n%s", gs, ws)
			}
		})
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType,
		[]byte(`{"status":{"conditions":[{"type":"Ready","$patch":"delete"}]}}`), metav1.PatchOptions{}, "status"); !apierrors.IsBadRequest(err) {
		t.Errorf("a $patch directive: %v; want BadRequest (the fake does not apply directives)", err)
	}
}

// The taint update's merge patch names the resourceVersion it read: the API server's
// precondition. JSON patches are refused rather than applied wrongly.
func TestMergePatchPreconditionAndUnsupportedPatches(t *testing.T) {
	ctx := t.Context()
	c := newClientset(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	nodes := c.CoreV1().Nodes()
	taints := func(rv string) error {
		_, err := nodes.Patch(ctx, "n1", types.MergePatchType,
			[]byte(`{"metadata":{"resourceVersion":"`+rv+`"},"spec":{"taints":[{"key":"evictiond.io/memory-pressure","effect":"NoSchedule"}]}}`), metav1.PatchOptions{})
		return err
	}
	if err := taints("1"); err != nil {
		t.Fatal(err)
	}
	if err := taints("1"); !apierrors.IsConflict(err) {
		t.Errorf("a patch at a stale resourceVersion: %v; want Conflict", err)
	}
	n, err := nodes.Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.ResourceVersion != "2" {
		t.Errorf("node after one patch: taints %v at %s; want one taint at 2", n.Spec.Taints, n.ResourceVersion)
	}
	if _, err := nodes.Patch(ctx, "n1", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{}); !apierrors.IsUnsupportedMediaType(err) {
		t.Errorf("a JSON patch: %v; want 415", err)
	}
	if _, err := nodes.Patch(ctx, "n2", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a patch of a missing node: %v; want NotFound", err)
	}
}

// Hooks answer before the store, the latest first; one that does not handle a call
// passes it on. Every call is recorded. Evictions and deletes check their UID
// precondition.
func TestHooksActionsAndPreconditions(t *testing.T) {
	ctx := t.Context()
	c := newClientset(t, pod("a", "n1", nil), pod("b", "n1", nil))
	var order []string
	c.OnCall("create", "pods", func(a Action) (bool, runtime.Object, error) {
		order = append(order, "first")
		return a.Name == "b", nil, errors.New("refused by the first hook")
	})
	c.OnCall("create", "pods", func(a Action) (bool, runtime.Object, error) {
		order = append(order, "second")
		return false, nil, nil
	})
	uid := types.UID("uid-a")
	other := types.UID("someone-else")
	evict := func(name string, u *types.UID) error {
		return c.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: u}}})
	}
	if err := evict("a", &uid); err != nil {
		t.Errorf("eviction of a: %v", err)
	}
	if err := evict("b", nil); err == nil || err.Error() != "refused by the first hook" {
		t.Errorf("eviction of b: %v; want the first hook's refusal", err)
	}
	if fmt.Sprint(order) != "[second first second first]" {
		t.Errorf("hooks ran %v; want the latest first, both for a, the second then the first for b", order)
	}
	if err := evict("a", &other); !apierrors.IsConflict(err) {
		t.Errorf("eviction with another UID: %v; want Conflict", err)
	}
	if err := evict("gone", nil); !apierrors.IsNotFound(err) {
		t.Errorf("eviction of a missing pod: %v; want NotFound", err)
	}
	if _, err := c.Store().Get("pods", "default", "a"); err != nil {
		t.Errorf("an eviction removed pod a (%v): the fake leaves that to the scenario", err)
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &other}}); !apierrors.IsConflict(err) {
		t.Errorf("delete with another UID: %v; want Conflict", err)
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Errorf("delete of a: %v", err)
	}
	var got []string
	for _, a := range c.Actions() {
		s := a.Verb + " " + a.Resource
		if a.Subresource != "" {
			s += "/" + a.Subresource
		}
		got = append(got, s+" "+a.Name)
		if a.Subresource == "eviction" {
			if _, ok := a.Object.(*policyv1.Eviction); !ok {
				t.Errorf("an eviction's action holds a %T, want the Eviction", a.Object)
			}
		}
	}
	want := "[create pods/eviction a create pods/eviction b create pods/eviction a create pods/eviction gone delete pods a delete pods a]"
	if fmt.Sprint(got) != want {
		t.Errorf("actions %v\nwant %s", got, want)
	}
	// A review's create answers the review as sent (not authenticated) unless a hook
	// answers, and keeps nothing.
	tr, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: "t"}}, metav1.CreateOptions{})
	if err != nil || tr.Spec.Token != "t" || tr.Status.Authenticated {
		t.Errorf("a TokenReview without a hook: %+v, %v; want it back unauthenticated", tr, err)
	}
}
