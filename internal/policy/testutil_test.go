package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Shared builders for the policy tests.

const (
	Ki = int64(1) << 10
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a settable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time       { return c.now }
func (c *fakeClock) Step(d time.Duration) { c.now = c.now.Add(d) }
func newFakeClock() *fakeClock            { return &fakeClock{now: t0} }
func obsAt(avail, capacity int64, at time.Time) Observation {
	return Observation{Available: avail, Capacity: capacity, Time: at}
}

// mustLoad compiles a configuration body (without apiVersion/kind) or fails.
func mustLoad(t testing.TB, body string) *Config {
	t.Helper()
	cfg, errs := Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + body))
	if errs != nil {
		t.Fatalf("config does not load: %v\n%s", errs, body)
	}
	return cfg
}

// loadErrors compiles a configuration body and returns its error lines.
func loadErrors(t testing.TB, body string) []string {
	t.Helper()
	_, errs := Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + body))
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// podOpt changes a test pod.
type podOpt func(*v1.Pod)

func newPod(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:   v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withPriority(prio int32) podOpt { return func(p *v1.Pod) { p.Spec.Priority = &prio } }
func withNamespace(ns string) podOpt { return func(p *v1.Pod) { p.Namespace = ns } }
func withLabels(kv ...string) podOpt {
	return func(p *v1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}
func withAnnotation(k, v string) podOpt {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}
func withCreated(at time.Time) podOpt {
	return func(p *v1.Pod) { p.CreationTimestamp = metav1.NewTime(at) }
}

// withRequests sets the first container's requests, e.g. "memory", "1Gi".
func withRequests(kv ...string) podOpt {
	return func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = resourceList(kv...) }
}
func withLimits(kv ...string) podOpt {
	return func(p *v1.Pod) { p.Spec.Containers[0].Resources.Limits = resourceList(kv...) }
}
func withContainers(cs ...v1.Container) podOpt { return func(p *v1.Pod) { p.Spec.Containers = cs } }
func withVolumes(vs ...v1.Volume) podOpt       { return func(p *v1.Pod) { p.Spec.Volumes = vs } }

func resourceList(kv ...string) v1.ResourceList {
	rl := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		rl[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return rl
}

func container(name string, requests, limits v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func emptyDir(name, sizeLimit string, medium v1.StorageMedium) v1.Volume {
	src := &v1.EmptyDirVolumeSource{Medium: medium}
	if sizeLimit != "" {
		q := resource.MustParse(sizeLimit)
		src.SizeLimit = &q
	}
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: src}}
}

func i64(v int64) *int64 { return &v }

// memStats is a pod using ws bytes of memory in its one container "c".
func memStats(ws int64) PodStats {
	return PodStats{MemoryWorkingSet: i64(ws), Containers: map[string]ContainerStats{"c": {MemoryWorkingSet: i64(ws)}}, Time: t0}
}

func podNames(pods []RankedPod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Pod.Name
	}
	return strings.Join(names, ",")
}

func signalsOf(ts []Threshold) string {
	var out []string
	for _, t := range ts {
		kind := "hard"
		if !t.Hard() {
			kind = "soft"
		}
		out = append(out, string(t.Signal)+"/"+kind)
	}
	return strings.Join(out, ",")
}
