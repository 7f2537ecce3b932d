package reclaim

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/evictiond/evictiond/internal/policy"
)

// LivePodsFromPods builds the live pod set from the pods the API server has bound to this node
// (any phase). The kubelet names a static pod's sandbox, containers and log directory with the
// static pod's own UID, which differs from its mirror pod's: the mirror pod's
// kubernetes.io/config.mirror annotation carries it, and both UIDs are included.
func LivePodsFromPods(pods []*v1.Pod) LivePods {
	live := sets.New[types.UID]()
	for _, p := range pods {
		if p == nil {
			continue
		}
		live.Insert(p.UID)
		if uid := p.Annotations[policy.MirrorAnnotation]; uid != "" {
			live.Insert(types.UID(uid))
		}
	}
	return live
}
