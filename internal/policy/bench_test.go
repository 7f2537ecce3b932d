package policy

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchNode builds a realistic node of n pods: a third Guaranteed, half
// Burstable, the rest BestEffort; sidecars, init containers, volumes,
// priorities, DaemonSet pods and a few critical ones; stats for every pod.
func benchNode(n int) ([]*v1.Pod, PodStatsByUID) {
	pods := make([]*v1.Pod, 0, n)
	stats := make(PodStatsByUID, n)
	trueVal := true
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("pod-%05d", i)
		p := newPod(name, withNamespace(fmt.Sprintf("ns-%d", i%20)), withPriority(int32(i%5)*100))
		p.Labels = map[string]string{"app": fmt.Sprintf("app-%d", i%50), "tier": "web"}
		ws := int64(50+(i*37)%400) * Mi
		switch i % 6 {
		case 0, 1: // Guaranteed, app + sidecar
			p.Spec.Containers = []v1.Container{
				container("app", resourceList("cpu", "500m", "memory", "512Mi"), resourceList("cpu", "500m", "memory", "512Mi")),
				container("proxy", resourceList("cpu", "100m", "memory", "64Mi"), resourceList("cpu", "100m", "memory", "64Mi")),
			}
		case 2, 3, 4: // Burstable with an init container and an emptyDir
			p.Spec.InitContainers = []v1.Container{container("init", resourceList("memory", "128Mi"), nil)}
			p.Spec.Containers = []v1.Container{container("app", resourceList("cpu", "250m", "memory", "256Mi", "ephemeral-storage", "1Gi"), resourceList("memory", "1Gi"))}
			p.Spec.Volumes = []v1.Volume{emptyDir("cache", "2Gi", ""), {Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}}
		default: // BestEffort
			p.Spec.Containers = []v1.Container{container("app", nil, nil)}
		}
		if i%25 == 0 {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds", Controller: &trueVal}}
		}
		if i%97 == 0 {
			prio := int32(SystemCriticalPriority)
			p.Spec.Priority = &prio
		}
		pods = append(pods, p)
		cs := map[string]ContainerStats{}
		for _, c := range p.Spec.Containers {
			cs[c.Name] = ContainerStats{MemoryWorkingSet: i64(ws / int64(len(p.Spec.Containers))), RootfsBytes: i64(20 * Mi), LogsBytes: i64(5 * Mi), RootfsInodes: i64(300), LogsInodes: i64(3)}
		}
		stats[types.UID(name)] = PodStats{MemoryWorkingSet: i64(ws), Processes: i64(int64(1 + i%30)), Containers: cs,
			Volumes: map[string]VolumeStats{"cache": {UsedBytes: i64(100 * Mi), InodesUsed: i64(40)}, "cfg": {UsedBytes: i64(4 * Ki), InodesUsed: i64(3)}},
			Time:    t0}
	}
	return pods, stats
}

const benchConfig = `
evictionHard: {memory.available: 500Mi, nodefs.available: 10%, imagefs.available: 15%, nodefs.inodesFree: 5%, pid.available: "2000"}
evictionSoft: {memory.available: 1Gi}
evictionSoftGracePeriod: {memory.available: 30s}
evictionMinimumReclaim: {memory.available: 256Mi}
exclusions: {namespaces: [kube-system], podSelector: {matchLabels: {protect: "true"}}, minPodAge: 1m}`

// BenchmarkDecision is one full decision under memory pressure: Assess (every
// threshold, conditions, local storage checks) and Select (exclusions,
// ranking, three candidates with messages).
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{110, 250, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			cfg := mustLoad(b, benchConfig)
			clock := newFakeClock()
			e := NewEngine(cfg, clock, "")
			pods, stats := benchNode(n)
			obs := Observations{
				SignalMemoryAvailable:            {Available: 300 * Mi, Capacity: 64 * Gi},
				SignalAllocatableMemoryAvailable: {Available: 2 * Gi, Capacity: 60 * Gi},
				SignalNodeFsAvailable:            {Available: 40 * Gi, Capacity: 100 * Gi},
				SignalNodeFsInodesFree:           {Available: 5_000_000, Capacity: 6_000_000},
				SignalImageFsAvailable:           {Available: 40 * Gi, Capacity: 100 * Gi},
				SignalPIDAvailable:               {Available: 30000, Capacity: 4194304},
			}
			b.ReportAllocs()
			cpuBefore := processCPU(b)
			for b.Loop() {
				clock.Step(time.Second)
				for s, o := range obs {
					o.Time = clock.now
					obs[s] = o
				}
				a := e.Assess(Input{Observations: obs, Pods: pods, Stats: stats})
				sel := e.Select(a, nil, 3)
				if len(sel.Candidates) != 3 {
					b.Fatalf("%d candidates (waiting %q, starved %v, met %d, local %d)", len(sel.Candidates), sel.Waiting, a.Starved != nil, len(a.Met), len(a.LocalStorage))
				}
			}
			// Wall time on a machine shared with other builds overstates the
			// cost; the process's CPU time per decision does not.
			b.ReportMetric(float64(processCPU(b)-cpuBefore)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time (user + system) the process has used, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
