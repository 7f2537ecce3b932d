package policy

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rankFor ranks pods for a signal the way Select does.
func rankFor(pods []*v1.Pod, stats PodStatsByUID, s Signal, layout FilesystemLayout) string {
	infos := make([]podInfo, 0, len(pods))
	for _, p := range pods {
		infos = append(infos, newPodInfo(p, stats, s, layout))
	}
	rankPods(infos, s)
	ranked := make([]RankedPod, len(infos))
	for i := range infos {
		ranked[i] = RankedPod{Pod: infos[i].pod}
	}
	return podNames(ranked)
}

// Section 3.6, rankMemoryPressure: exceeds request, then priority, then usage
// above request; pods without stats first.
func TestRank_MemoryPressure(t *testing.T) {
	cases := []struct {
		name  string
		pods  []*v1.Pod
		stats PodStatsByUID
		want  string
	}{
		{
			name:  "exceeding its request beats a bigger pod within its request",
			pods:  []*v1.Pod{newPod("big-within", withRequests("memory", "4Gi")), newPod("small-over", withRequests("memory", "100Mi"))},
			stats: PodStatsByUID{"big-within": memStats(3 * Gi), "small-over": memStats(200 * Mi)},
			want:  "small-over,big-within",
		},
		{
			name:  "among pods over their request, lower priority first even if it uses less (kubernetes#101167)",
			pods:  []*v1.Pod{newPod("hi", withPriority(1000), withRequests("memory", "100Mi")), newPod("lo", withPriority(-10), withRequests("memory", "100Mi"))},
			stats: PodStatsByUID{"hi": memStats(4 * Gi), "lo": memStats(101 * Mi)},
			want:  "lo,hi",
		},
		{
			name:  "same priority: larger usage above request first",
			pods:  []*v1.Pod{newPod("a", withRequests("memory", "1Gi")), newPod("b", withRequests("memory", "100Mi")), newPod("c")},
			stats: PodStatsByUID{"a": memStats(2 * Gi), "b": memStats(1 * Gi), "c": memStats(500 * Mi)},
			want:  "a,b,c", // 1Gi over, 924Mi over, 500Mi over (BestEffort: request 0)
		},
		{
			name:  "within request: priority, then usage above request (negative)",
			pods:  []*v1.Pod{newPod("guaranteed", withRequests("memory", "2Gi")), newPod("small", withRequests("memory", "1Gi"))},
			stats: PodStatsByUID{"guaranteed": memStats(1 * Gi), "small": memStats(900 * Mi)},
			want:  "small,guaranteed", // -124Mi beats -1Gi
		},
		{
			name:  "pods without stats rank first",
			pods:  []*v1.Pod{newPod("hog"), newPod("unknown", withPriority(1000))},
			stats: PodStatsByUID{"hog": memStats(6 * Gi)},
			want:  "unknown,hog",
		},
		{
			name: "request includes init containers (max) and overhead",
			pods: []*v1.Pod{
				newPod("init-heavy", func(p *v1.Pod) {
					p.Spec.InitContainers = []v1.Container{container("init", resourceList("memory", "2Gi"), nil)}
				}),
				newPod("overhead", func(p *v1.Pod) { p.Spec.Overhead = resourceList("memory", "1500Mi") }),
				newPod("plain"),
			},
			stats: PodStatsByUID{"init-heavy": memStats(1 * Gi), "overhead": memStats(1 * Gi), "plain": memStats(10 * Mi)},
			want:  "plain,overhead,init-heavy",
		},
		{
			name:  "ties keep namespace/name order",
			pods:  []*v1.Pod{newPod("z"), newPod("a", withNamespace("x")), newPod("m")},
			stats: PodStatsByUID{"z": memStats(Mi), "a": memStats(Mi), "m": memStats(Mi)},
			want:  "m,z,a",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range []Signal{SignalMemoryAvailable, SignalAllocatableMemoryAvailable, SignalMemoryPSIFullAvg10} {
				if got := rankFor(tc.pods, tc.stats, s, FilesystemLayout{}); got != tc.want {
					t.Fatalf("%s ranking = %s, want %s", s, got, tc.want)
				}
			}
		})
	}
}

// rankPIDPressure: priority, then process count.
func TestRank_PIDPressure(t *testing.T) {
	procs := func(n int64) PodStats { return PodStats{Processes: i64(n)} }
	cases := []struct {
		name  string
		pods  []*v1.Pod
		stats PodStatsByUID
		want  string
	}{
		{"lower priority first even with fewer processes",
			[]*v1.Pod{newPod("forker", withPriority(100)), newPod("quiet")},
			PodStatsByUID{"forker": procs(5000), "quiet": procs(3)}, "quiet,forker"},
		{"same priority: more processes first",
			[]*v1.Pod{newPod("few"), newPod("many"), newPod("some")},
			PodStatsByUID{"few": procs(2), "many": procs(900), "some": procs(40)}, "many,some,few"},
		{"memory requests do not matter",
			[]*v1.Pod{newPod("over", withRequests("memory", "1Mi")), newPod("many")},
			PodStatsByUID{"over": {Processes: i64(1), MemoryWorkingSet: i64(Gi)}, "many": procs(50)}, "many,over"},
		{"without stats first within a priority",
			[]*v1.Pod{newPod("many"), newPod("unknown")},
			PodStatsByUID{"many": procs(900)}, "unknown,many"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rankFor(tc.pods, tc.stats, SignalPIDAvailable, FilesystemLayout{}); got != tc.want {
				t.Fatalf("ranking = %s, want %s", got, tc.want)
			}
		})
	}
}

// Section 3.6's table: which usage a disk signal ranks by, per layout.
func TestRank_DiskUsagePerLayout(t *testing.T) {
	// rootfs-heavy writes to its writable layer, logs-heavy to its logs,
	// volume-heavy to an emptyDir; each uses 10 GiB of one kind, 1 GiB of the others.
	usage := func(root, logs, vol int64) PodStats {
		return PodStats{
			Containers: map[string]ContainerStats{"c": {RootfsBytes: i64(root), LogsBytes: i64(logs), RootfsInodes: i64(root / Mi), LogsInodes: i64(logs / Mi)}},
			Volumes:    map[string]VolumeStats{"data": {UsedBytes: i64(vol), InodesUsed: i64(vol / Mi)}},
		}
	}
	vol := withVolumes(emptyDir("data", "", ""))
	pods := []*v1.Pod{newPod("rootfs-heavy", vol), newPod("logs-heavy", vol), newPod("volume-heavy", vol)}
	stats := PodStatsByUID{
		"rootfs-heavy": usage(10*Gi, Gi, Gi),
		"logs-heavy":   usage(Gi, 10*Gi+Gi/2, Gi),
		"volume-heavy": usage(Gi, Gi, 11*Gi),
	}
	single := FilesystemLayout{}
	dedicated := FilesystemLayout{DedicatedImageFs: true}
	split := FilesystemLayout{DedicatedImageFs: true, SplitContainerFs: true}
	cases := []struct {
		signal Signal
		layout FilesystemLayout
		want   string
	}{
		// single fs: root + logs + volumes: 12, 12.5, 13 GiB
		{SignalNodeFsAvailable, single, "volume-heavy,logs-heavy,rootfs-heavy"},
		{SignalImageFsAvailable, single, "volume-heavy,logs-heavy,rootfs-heavy"},
		{SignalContainerFsAvailable, single, "volume-heavy,logs-heavy,rootfs-heavy"},
		{SignalNodeFsInodesFree, single, "volume-heavy,logs-heavy,rootfs-heavy"},
		// dedicated imagefs: nodefs = logs + volumes (2, 11.5, 12); imagefs = root (10, 1, 1)
		{SignalNodeFsAvailable, dedicated, "volume-heavy,logs-heavy,rootfs-heavy"},
		{SignalImageFsAvailable, dedicated, "rootfs-heavy,logs-heavy,volume-heavy"},
		{SignalContainerFsAvailable, dedicated, "rootfs-heavy,logs-heavy,volume-heavy"},
		{SignalImageFsInodesFree, dedicated, "rootfs-heavy,logs-heavy,volume-heavy"},
		// split: nodefs/containerfs = root + logs + volumes; imagefs = images only: no pod usage, name order
		{SignalNodeFsAvailable, split, "volume-heavy,logs-heavy,rootfs-heavy"},
		{SignalContainerFsAvailable, split, "volume-heavy,logs-heavy,rootfs-heavy"},
		{SignalImageFsAvailable, split, "logs-heavy,rootfs-heavy,volume-heavy"},
	}
	for _, tc := range cases {
		t.Run(string(tc.signal)+"/"+layoutName(tc.layout), func(t *testing.T) {
			if got := rankFor(pods, stats, tc.signal, tc.layout); got != tc.want {
				t.Fatalf("ranking = %s, want %s", got, tc.want)
			}
		})
	}
	// The dedicated-imagefs nodefs case must not count the writable layer.
	pi := newPodInfo(pods[0], stats, SignalNodeFsAvailable, dedicated)
	if pi.disk != 2*Gi {
		t.Fatalf("rootfs-heavy nodefs usage with dedicated imagefs = %d, want logs+volume %d", pi.disk, 2*Gi)
	}
}

func layoutName(l FilesystemLayout) string {
	switch {
	case l.SplitContainerFs:
		return "split"
	case l.DedicatedImageFs:
		return "dedicated-imagefs"
	}
	return "single-fs"
}

// rankDiskPressureFunc: exceeds ephemeral-storage request, priority, usage
// above request.
func TestRank_DiskPressureKeys(t *testing.T) {
	disk := func(n int64) PodStats {
		return PodStats{Containers: map[string]ContainerStats{"c": {RootfsBytes: i64(n), LogsBytes: i64(0)}}}
	}
	cases := []struct {
		name  string
		pods  []*v1.Pod
		stats PodStatsByUID
		want  string
	}{
		{"exceeding the ephemeral-storage request first",
			[]*v1.Pod{newPod("big-within", withRequests("ephemeral-storage", "20Gi")), newPod("small-over", withRequests("ephemeral-storage", "1Gi"))},
			PodStatsByUID{"big-within": disk(15 * Gi), "small-over": disk(2 * Gi)}, "small-over,big-within"},
		{"then lower priority",
			[]*v1.Pod{newPod("hi", withPriority(10)), newPod("lo")},
			PodStatsByUID{"hi": disk(15 * Gi), "lo": disk(Gi)}, "lo,hi"},
		{"then usage above request",
			[]*v1.Pod{newPod("a", withRequests("ephemeral-storage", "5Gi")), newPod("b")},
			PodStatsByUID{"a": disk(8 * Gi), "b": disk(4 * Gi)}, "b,a"},
		{"without stats first",
			[]*v1.Pod{newPod("a"), newPod("nostats", withPriority(100))},
			PodStatsByUID{"a": disk(8 * Gi)}, "nostats,a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rankFor(tc.pods, tc.stats, SignalNodeFsAvailable, FilesystemLayout{}); got != tc.want {
				t.Fatalf("ranking = %s, want %s", got, tc.want)
			}
		})
	}
}

// The kubelet's inodes quirks: the request is 0 for "exceeds", so any usage
// exceeds; yet the ephemeral-storage request is subtracted for the last key.
func TestRank_InodesQuirks(t *testing.T) {
	inodes := func(n int64) PodStats {
		return PodStats{Containers: map[string]ContainerStats{"c": {RootfsInodes: i64(n), RootfsBytes: i64(Gi)}}}
	}
	// "requested" has a huge ephemeral-storage request: by bytes it would be
	// within its request, but for inodes any usage exceeds.
	pods := []*v1.Pod{newPod("idle"), newPod("requested", withPriority(5), withRequests("ephemeral-storage", "100Gi"))}
	stats := PodStatsByUID{"idle": inodes(0), "requested": inodes(10)}
	if got := rankFor(pods, stats, SignalNodeFsInodesFree, FilesystemLayout{}); got != "requested,idle" {
		t.Fatalf("inodes ranking = %s, want requested,idle (any inode use exceeds a request of 0)", got)
	}
	// Both exceed, same priority: usage minus the *bytes* request decides, so
	// a pod with a large ephemeral-storage request ranks after one using fewer inodes.
	pods = []*v1.Pod{newPod("many-inodes", withRequests("ephemeral-storage", "1Ki")), newPod("few-inodes")}
	stats = PodStatsByUID{"many-inodes": inodes(1000), "few-inodes": inodes(100)}
	if got := rankFor(pods, stats, SignalNodeFsInodesFree, FilesystemLayout{}); got != "few-inodes,many-inodes" {
		t.Fatalf("inodes ranking = %s, want few-inodes,many-inodes (1000-1024 < 100-0)", got)
	}
}

// localVolumeNames: hostPath, disk-backed emptyDir, configMap, gitRepo count;
// memory-backed (and hugepages) emptyDirs, secrets and PVCs do not.
func TestLocalVolumeNames(t *testing.T) {
	pod := newPod("p", withVolumes(
		emptyDir("disk", "", v1.StorageMediumDefault),
		emptyDir("tmpfs", "", v1.StorageMediumMemory),
		emptyDir("huge", "", v1.StorageMediumHugePages),
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}},
		v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		v1.Volume{Name: "git", VolumeSource: v1.VolumeSource{GitRepo: &v1.GitRepoVolumeSource{}}},
		v1.Volume{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}},
		v1.Volume{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}},
	))
	got := localVolumeNames(pod)
	want := []string{"disk", "host", "cm", "git"}
	if len(got) != len(want) {
		t.Fatalf("local volumes = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("local volumes = %v, want %v", got, want)
		}
	}
}

func TestRank_PodWithStatsEntryButNoMeasuredUsageRanksAsWithoutStats(t *testing.T) {
	measured := int64(50 << 20)
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "ns", UID: "pending"}}
	running := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "running", Namespace: "ns", UID: "running"}}
	stats := PodStatsByUID{
		"pending": {Volumes: map[string]VolumeStats{}}, // disk-only entry: no cgroup yet
		"running": {MemoryWorkingSet: &measured, Processes: ptr(int64(3))},
	}
	for _, sig := range []Signal{SignalMemoryAvailable, SignalPIDAvailable} {
		infos := []podInfo{newPodInfo(running, stats, sig, FilesystemLayout{}), newPodInfo(pending, stats, sig, FilesystemLayout{})}
		rankPods(infos, sig)
		if infos[0].pod.Name != "pending" {
			t.Errorf("%s: ranking %s, %s; a pod whose usage was not measured must rank first, as the kubelet ranks pods without stats", sig, infos[0].pod.Name, infos[1].pod.Name)
		}
	}
}

func TestRankPIDs_ThreadsCountWhenMeasured(t *testing.T) {
	// A pod of 2 processes holding 3000 threads consumes pid.available far more
	// than a pod of 20 single-threaded processes: rank by tasks when measured.
	threads := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "threads", Namespace: "ns", UID: "threads"}}
	forks := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forks", Namespace: "ns", UID: "forks"}}
	stats := PodStatsByUID{
		"threads": {Processes: ptr(int64(2)), Tasks: ptr(int64(3000))},
		"forks":   {Processes: ptr(int64(20)), Tasks: ptr(int64(20))},
	}
	infos := []podInfo{newPodInfo(forks, stats, SignalPIDAvailable, FilesystemLayout{}), newPodInfo(threads, stats, SignalPIDAvailable, FilesystemLayout{})}
	rankPods(infos, SignalPIDAvailable)
	if infos[0].pod.Name != "threads" {
		t.Fatalf("ranked %s first; the pod holding 3000 tasks must go first", infos[0].pod.Name)
	}
	if got := rankReason(&infos[0], SignalPIDAvailable, 1, 2); !strings.Contains(got, "3000 tasks (threads included)") {
		t.Errorf("reason %q does not say it counted tasks", got)
	}
	if got := expectedReclaim(&infos[0], SignalPIDAvailable); got != 3000 {
		t.Errorf("expected reclaim %d, want 3000 tasks", got)
	}
}

func TestEvictionMessage_DiskNamesThePodsLocalVolumes(t *testing.T) {
	used := int64(2 << 30)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "ns", UID: "filler"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}},
			Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
	stats := PodStatsByUID{"filler": {Volumes: map[string]VolumeStats{"scratch": {UsedBytes: &used}}}}
	p := newPodInfo(pod, stats, SignalNodeFsAvailable, FilesystemLayout{})
	th := Threshold{Signal: SignalNodeFsAvailable, Value: ThresholdValue{Percentage: 0.1}, Raw: "10%"}
	msg, _ := evictionMessage(&p, th, Observation{Available: 1 << 30, Capacity: 100 << 30})
	if !strings.Contains(msg, "Pod local volumes were using scratch 2Gi. ") {
		t.Fatalf("message %q does not name the emptyDir that holds the space", msg)
	}
}

func TestRankDisk_UnmeasuredDiskUsageRanksAsWithoutStats(t *testing.T) {
	// Seen end to end: a new pod filling an emptyDir, whose disk usage the
	// housekeeping had not measured yet, ranked after a bystander using 4Ki.
	small := int64(4 << 10)
	filler := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "ns", UID: "filler"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
	bystander := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bystander", Namespace: "ns", UID: "bystander"}}
	stats := PodStatsByUID{
		"filler":    {Containers: map[string]ContainerStats{"c": {}}, Volumes: map[string]VolumeStats{}},
		"bystander": {Containers: map[string]ContainerStats{"c": {RootfsBytes: &small}}},
	}
	if got := rankFor([]*v1.Pod{bystander, filler}, stats, SignalNodeFsAvailable, FilesystemLayout{}); !strings.HasPrefix(got, "filler") {
		t.Fatalf("ranking %s; the pod whose disk usage was not measured must rank first", got)
	}
}
