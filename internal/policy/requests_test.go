package policy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// podRequest and podEphemeralStorageLimit are fast paths of component-helpers'
// PodRequests / PodLimits; they must agree with them on every pod shape.
func TestPodRequest_MatchesComponentHelpers(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	sidecar := func(name string, reqs v1.ResourceList) v1.Container {
		c := container(name, reqs, nil)
		c.RestartPolicy = &always
		return c
	}
	rl := resourceList
	pods := map[string]*v1.Pod{
		"no requests":    newPod("p"),
		"one container":  newPod("p", withRequests("memory", "1Gi", "ephemeral-storage", "2Gi")),
		"two containers": newPod("p", withContainers(container("a", rl("memory", "1Gi"), nil), container("b", rl("memory", "500Mi", "ephemeral-storage", "1Gi"), nil))),
		"init container larger": newPod("p", withRequests("memory", "1Gi"), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{container("init", rl("memory", "3Gi", "ephemeral-storage", "5Gi"), nil)}
		}),
		"init container smaller": newPod("p", withRequests("memory", "1Gi"), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{container("init", rl("memory", "100Mi"), nil)}
		}),
		"sidecars before and after an init container": newPod("p", withRequests("memory", "1Gi"), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{
				sidecar("s1", rl("memory", "200Mi")),
				container("init", rl("memory", "1500Mi"), nil),
				sidecar("s2", rl("memory", "300Mi", "ephemeral-storage", "1Gi")),
				container("init2", rl("ephemeral-storage", "4Gi"), nil),
			}
		}),
		"overhead": newPod("p", withRequests("memory", "1Gi"), func(p *v1.Pod) { p.Spec.Overhead = rl("memory", "120Mi", "ephemeral-storage", "10Mi") }),
		"pod-level requests": newPod("p", withRequests("memory", "1Gi", "ephemeral-storage", "1Gi"), func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("memory", "3Gi", "cpu", "2")}
			p.Spec.Overhead = rl("memory", "1Mi")
		}),
		"pod-level limits only": newPod("p", withRequests("memory", "1Gi"), func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Limits: rl("memory", "3Gi")}
		}),
		"fractional quantities round up once": newPod("p", withContainers(container("a", rl("memory", "1500m"), nil), container("b", rl("memory", "1500m"), nil))),
		"decimal and binary mixed":            newPod("p", withContainers(container("a", rl("memory", "1G"), nil), container("b", rl("memory", "1Gi"), nil))),
		"ephemeral limits in init and sidecar": newPod("p", withLimits("ephemeral-storage", "1Gi"), func(p *v1.Pod) {
			s := sidecar("s", nil)
			s.Resources.Limits = rl("ephemeral-storage", "500Mi")
			p.Spec.InitContainers = []v1.Container{s, container("init", nil, rl("ephemeral-storage", "4Gi"))}
			p.Spec.Overhead = rl("ephemeral-storage", "1Mi")
		}),
		"ephemeral limit only on an init container": newPod("p", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{container("init", nil, rl("ephemeral-storage", "4Gi"))}
		}),
	}
	for name, pod := range pods {
		t.Run(name, func(t *testing.T) {
			before := pod.DeepCopy()
			reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
			for _, res := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourceCPU} {
				want := int64(0)
				if q, ok := reqs[res]; ok {
					want = q.Value()
				}
				if got := podRequest(pod, res); got != want {
					t.Errorf("podRequest(%s) = %d, PodRequests says %d", res, got, want)
				}
			}
			limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
			wantLimit, wantOK := limits[v1.ResourceEphemeralStorage]
			gotLimit, gotOK := podEphemeralStorageLimit(pod)
			if gotOK != wantOK || gotLimit.Cmp(wantLimit) != 0 {
				t.Errorf("podEphemeralStorageLimit = %v %v, PodLimits says %v %v", gotLimit.String(), gotOK, wantLimit.String(), wantOK)
			}
			if !equalPods(before, pod) {
				t.Errorf("the pod's quantities were changed")
			}
		})
	}
}

func equalPods(a, b *v1.Pod) bool {
	cmpList := func(x, y v1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, q := range x {
			if r, ok := y[k]; !ok || q.Cmp(r) != 0 {
				return false
			}
		}
		return true
	}
	all := func(p *v1.Pod) []v1.ResourceList {
		var out []v1.ResourceList
		for _, c := range append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			out = append(out, c.Resources.Requests, c.Resources.Limits)
		}
		return append(out, p.Spec.Overhead)
	}
	x, y := all(a), all(b)
	for i := range x {
		if !cmpList(x[i], y[i]) {
			return false
		}
	}
	return true
}
