package monitor

import (
	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/brake"
)

// PodCgroup locates a pod's cgroup for the brake: its directory in the
// freezer hierarchy on cgroup v1, in the unified hierarchy on v2. It goes by
// the pod's QoS class as the kubelet places it, and by the mirror
// annotation's UID for a static pod (which the brake never freezes anyway).
func (m *Monitor) PodCgroup(pod *v1.Pod) (brake.PodCgroup, error) {
	ref := PodRefsFromPods([]*v1.Pod{pod})[0]
	p, err := m.locatePod(ref)
	if err != nil {
		return brake.PodCgroup{}, err
	}
	if m.cgl().version == CgroupV2 {
		return brake.PodCgroup{Version: brake.V2, Dir: m.cgl().dir("", p)}, nil
	}
	return brake.PodCgroup{Version: brake.V1, Dir: m.cgl().dir("freezer", p)}, nil
}
