package agent

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// notePodPressure finds the pods stalled against their own memory limits
// (policy.AssessPodPressure), reports each once per episode (a Warning
// Event on the pod, a log line, evictiond_pod_memory_pressure_self_inflicted*)
// and returns the PSI signals their stall explains, which the assessment
// then does not count as node pressure.
func (a *Agent) notePodPressure(pods []*v1.Pod, obs Observed) *policy.PodPressureAssessment {
	pa := policy.AssessPodPressure(a.engine.Config(), obs.Observations, obs.Layout, pods, obs.Pods)
	now := map[types.UID]bool{}
	if pa != nil {
		for _, s := range pa.Pods {
			now[s.Pod.UID] = true
			if a.selfStalled[s.Pod.UID] {
				continue
			}
			a.metrics.PodPressureSelfInflictedTotal.Inc()
			explains := make([]string, 0, len(pa.Explained))
			for _, why := range pa.Explained {
				explains = append(explains, why)
			}
			a.log.Warn("pod stalled on memory against its own limit: reported, not taken for node pressure", "pod", s.Pod.Namespace+"/"+s.Pod.Name,
				"uid", s.Pod.UID, "why", s.Reason, "explains", explains)
			a.recorder.Eventf(s.Pod, v1.EventTypeWarning, "SelfInflictedMemoryPressure",
				"Stalled on memory against its own limit: %s. The node is not short of memory; no other pod is evicted for it.", s.Reason)
		}
	}
	for uid := range a.selfStalled {
		if !now[uid] {
			a.log.Info("pod no longer stalled against its own limit", "uid", uid)
		}
	}
	a.selfStalled = now
	a.metrics.PodPressureSelfInflicted.Set(float64(len(now)))
	return pa
}
