package monitor

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// The disk refresher's pacing. Per-pod disk usage (logs, local volumes) serves
// two decisions: the local-storage limit checks of every pass, which concern
// only pods with an emptyDir sizeLimit or an ephemeral-storage limit, and the
// ranking of pods under nodefs, imagefs or containerfs pressure, which concerns
// all pods but only once such a threshold is met. Walking every pod's trees at
// every housekeeping (12% of the idle agent's CPU at 110 pods) keeps the second
// one's figures warm while no filesystem is anywhere near a threshold. So:
//
//   - limited pods are measured at every housekeeping, as before;
//   - the other pods at every housekeeping only while a filesystem signal is
//     near a threshold (or a filesystem reading is missing), and otherwise at
//     every idleWalkFactor-th one (60 s at the default 10 s: the kubelet's own
//     volume statistics are refreshed every minute, --volume-stats-agg-period);
//   - "near": a fill at diskWalkRampRate bytes/s or diskWalkInodeRate inodes/s
//     could reach a threshold's value before the next such walk. A met
//     threshold is near;
//   - ranking (ObservePods) while a filesystem signal is near re-measures a pod
//     whose figures are older than one housekeeping interval before using them,
//     so a step from far away (a crossing before the refresher saw it coming)
//     still ranks on figures no older than before this pacing.
const (
	idleWalkFactor    = 6
	diskWalkRampRate  = 128 << 20 // bytes per second: a fast image pull's extraction, a log flood
	diskWalkInodeRate = 20_000    // inodes per second: unpacking an image of small files
)

// fsSignals are the filesystem signals whose thresholds pace the walk.
var fsSignals = map[policy.Signal]bool{
	policy.SignalNodeFsAvailable: false, policy.SignalImageFsAvailable: false, policy.SignalContainerFsAvailable: false,
	policy.SignalNodeFsInodesFree: true, policy.SignalImageFsInodesFree: true, policy.SignalContainerFsInodesFree: true,
}

// SetFilesystemThresholds gives the disk refresher the thresholds that pace it
// (the configuration's; called again on a reload). Until it is called every
// pod is measured at every housekeeping.
func (m *Monitor) SetFilesystemThresholds(ts []policy.Threshold) {
	var fs []policy.Threshold
	for _, t := range ts {
		if _, ok := fsSignals[t.Signal]; ok {
			fs = append(fs, t)
		}
	}
	m.mu.Lock()
	m.fsThresholds, m.fsThresholdsSet = fs, true
	m.mu.Unlock()
}

// filesystemsNear says whether obs puts a filesystem signal within reach of a
// threshold before the next idle walk (see the pacing above); a signal with a
// threshold but no reading is near. The configuration's thresholds suffice:
// the containerfs.* ones policy.ThresholdsFor derives are copies of nodefs.*
// or imagefs.* on the filesystem containerfs then lives on.
func filesystemsNear(obs policy.Observations, ts []policy.Threshold, idleWalk time.Duration) bool {
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			return true
		}
		rate := float64(diskWalkRampRate)
		if fsSignals[t.Signal] {
			rate = diskWalkInodeRate
		}
		if float64(o.Available-t.Value.Resolve(o.Capacity)) < rate*idleWalk.Seconds() {
			return true
		}
	}
	return false
}

// noteFilesystems records whether this pass's filesystem readings are near a
// threshold, for the refresher and ranking.
func (m *Monitor) noteFilesystems(obs policy.Observations) {
	m.mu.Lock()
	near := !m.fsThresholdsSet || filesystemsNear(obs, m.fsThresholds, m.idleWalk())
	m.mu.Unlock()
	if wasFar := m.fsFar.Swap(!near); wasFar == near {
		m.log.Debug("disk usage walk paced", "everyPod", m.cfg.HousekeepingInterval, "filesystemNearThreshold", near, "idleWalk", m.idleWalk())
	}
}

func (m *Monitor) idleWalk() time.Duration { return idleWalkFactor * m.cfg.HousekeepingInterval }

// localStorageLimited: the pod has a limit the local-storage checks of every
// pass compare its disk usage with (policy.localStorageViolation's).
func localStorageLimited(p *v1.Pod) bool {
	for _, vol := range p.Spec.Volumes {
		if vol.EmptyDir != nil && vol.EmptyDir.SizeLimit != nil && vol.EmptyDir.SizeLimit.Sign() == 1 {
			return true
		}
	}
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[v1.ResourceEphemeralStorage]; ok {
				return true
			}
		}
	}
	return false
}
