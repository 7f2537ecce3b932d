//go:build nodev2

package nodev2

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPIDPressure is claim (4) on the v2 node: a pod starting threads far beyond the
// node's PID threshold is evicted by evictiond, a bystander keeps running. The threshold is
// set 1500 tasks below what is available now (the node's capacity is min(kernel.pid_max,
// kernel.threads-max), 4194304 with systemd's default pid_max: far too many to exhaust in
// a VM).
func testPIDPressure(t *testing.T, n *node) {
	ns := "v2-pids"
	createNamespace(t, n, ns)
	facts := strings.Fields(n.sh(t, "cat /proc/sys/kernel/pid_max /proc/sys/kernel/threads-max; cut -d' ' -f4 /proc/loadavg | cut -d/ -f2"))
	if len(facts) != 3 {
		t.Fatalf("reading the guest's PID limits and tasks: %v", facts)
	}
	var v [3]int64
	for i, f := range facts {
		v[i], _ = strconv.ParseInt(f, 10, 64)
	}
	available := min(v[0], v[1]) - v[2]
	threshold := available - 1500
	config := strings.Replace(scenarioConfig, "pid.available: 2%", fmt.Sprintf("pid.available: %q", strconv.FormatInt(threshold, 10)), 1)
	setConfig(t, n, config)
	defer setConfig(t, n, scenarioConfig)
	t.Logf("pid capacity %d, %d tasks, threshold pid.available<%d", min(v[0], v[1]), v[2], threshold)

	n.createPod(t, podOnNode(ns, "bystander", workloadContainer("idle", "idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil)))
	n.waitPod(t, ns, "bystander", 2*time.Minute, "Ready", podReady)
	hog := n.createPod(t, podOnNode(ns, "pidhog", workloadContainer("pidhog", "pidhog", []string{"-mode=threads", "-count=3000", "-rate=1000"}, resources("cpu", "100m", "memory", "64Mi"), nil)))
	n.waitPodGone(t, ns, "pidhog", hog.UID, 3*time.Minute)
	evicted := n.waitEvents(t, ns, "Evicted", 10*time.Second)
	if len(evicted) != 1 || evicted[0].InvolvedObject.Name != "pidhog" || evicted[0].Source.Component != "evictiond" {
		t.Fatalf("Evicted events %s, want exactly one, for pidhog, from evictiond\n--- evictiond ---\n%s", describeEvents(evicted), n.evictiondLog(t, 20))
	}
	t.Logf("pidhog evicted: %s", evicted[0].Message)
	if p, err := n.client.CoreV1().Pods(ns).Get(context.Background(), "bystander", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("bystander hurt: %v %s", err, describeStatus(p))
	}
	_ = n.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
}

// padImage builds a docker-archive image in the guest (a layer of size MiB of random bytes,
// plus /idle when withIdle, so a pod can run it) and imports it into containerd's k8s.io
// namespace: the node has no registry and no builder, only tar, sha256sum and ctr.
const padImage = `set -eu
ref=$1; mib=$2; withIdle=$3
d=$(mktemp -d /mnt/node/img.XXXXXX); mkdir "$d/l"
head -c "${mib}M" /dev/urandom > "$d/l/pad"
if [ "$withIdle" = 1 ]; then cp /usr/local/share/idle "$d/l/idle"; fi
(cd "$d/l" && tar cf ../layer.tar .)
ls=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"config":{"Entrypoint":["/idle"]}}' "$ls" > "$d/config.json"
cs=$(sha256sum "$d/config.json" | cut -d' ' -f1)
mv "$d/config.json" "$d/$cs.json"; mv "$d/layer.tar" "$d/$ls.tar"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s.tar"]}]' "$cs" "$ref" "$ls" > "$d/manifest.json"
(cd "$d" && tar cf - manifest.json "$cs.json" "$ls.tar") | ctr -n k8s.io images import -
rm -rf "$d"
`

// testDiskPressure is claim (3) on the v2 node: under nodefs/imagefs pressure evictiond
// first removes unused images through containerd 2.x's CRI, least recently used first,
// keeping pinned images and the image of a running pod, and evicts the pod filling the disk
// only when that is not enough. ImageFsInfo is read right: the imagefs evictiond reports is
// the node's disk.
func testDiskPressure(t *testing.T, n *node) {
	ns := "v2-disk"
	createNamespace(t, n, ns)
	ctx := context.Background()
	// An image a running pod uses (unpinned: only its use protects it), then three unused
	// ones, each seen by evictiond before the next (first seen = least recently used).
	n.sh(t, "sh -c '"+strings.ReplaceAll(padImage, "'", `'\''`)+"' pad e2e.evictiond.io/inuse:dev 32 1")
	n.createPod(t, podOnNode(ns, "inuse", corev1.Container{Name: "idle", Image: "e2e.evictiond.io/inuse:dev", ImagePullPolicy: corev1.PullNever,
		Resources: corev1.ResourceRequirements{Requests: resources("memory", "16Mi")}}))
	n.waitPod(t, ns, "inuse", 2*time.Minute, "Ready", podReady)
	unused := []string{"e2e.evictiond.io/unused-0:dev", "e2e.evictiond.io/unused-1:dev", "e2e.evictiond.io/unused-2:dev"}
	for _, ref := range unused {
		n.sh(t, "sh -c '"+strings.ReplaceAll(padImage, "'", `'\''`)+"' pad "+ref+" 48 0")
		time.Sleep(3 * time.Second) // evictiond's image tracking sees each at another time
	}
	time.Sleep(12 * time.Second) // imageGC.minAge is 10 s

	// The threshold sits 300 MiB below today's free space on the node's disk; the filler
	// crosses it, image GC (asked for 200 MiB more by the minimum reclaim) frees the unused
	// images (~96 MiB each: content and snapshot), and only later is the filler evicted.
	free := diskFree(t, n)
	threshold := fmt.Sprintf("%dMi", (free>>20)-300)
	config := strings.Replace(scenarioConfig, "nodefs.available: 2%", "nodefs.available: "+threshold, 1)
	config = strings.Replace(config, "imagefs.available: 2%", "imagefs.available: "+threshold, 1)
	config = strings.Replace(config, "evictionMinimumReclaim:\n", "evictionMinimumReclaim:\n  nodefs.available: 200Mi\n  imagefs.available: 200Mi\n", 1)
	setConfig(t, n, config)
	defer setConfig(t, n, scenarioConfig)

	filler := podOnNode(ns, "filler", workloadContainer("diskfill", "diskfill", []string{"-dir=/scratch", "-rate-mib=40", "-target-mib=3000"}, resources("cpu", "100m", "memory", "64Mi"), nil))
	filler.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	filler.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	created := n.createPod(t, filler)
	gone := map[string]time.Time{}
	deadline := time.Now().Add(4 * time.Minute)
	var fillerGoneAt time.Time
	for time.Now().Before(deadline) {
		list := n.sh(t, "ctr -n k8s.io images list --quiet")
		for _, ref := range unused {
			if _, seen := gone[ref]; !seen && !strings.Contains(list, ref) {
				gone[ref] = time.Now()
			}
		}
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, "filler", metav1.GetOptions{})
		if err != nil || p.UID != created.UID || podFinished(p) {
			fillerGoneAt = time.Now()
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if fillerGoneAt.IsZero() {
		t.Fatalf("the filler was not evicted within 4 minutes\n--- evictiond ---\n%s", n.evictiondLog(t, 30))
	}
	for i, ref := range unused {
		at, ok := gone[ref]
		if !ok {
			t.Errorf("unused image %s still there after the filler's eviction", ref)
			continue
		}
		if !at.Before(fillerGoneAt) {
			t.Errorf("unused image %s went after the filler was evicted: reclaim must come first", ref)
		}
		if i > 0 {
			if prev, ok := gone[unused[i-1]]; ok && at.Before(prev) {
				t.Errorf("image %s went before %s, which evictiond saw earlier: not least recently used first", ref, unused[i-1])
			}
		}
	}
	evicted := n.waitEvents(t, ns, "Evicted", 10*time.Second)
	if len(evicted) != 1 || evicted[0].InvolvedObject.Name != "filler" || evicted[0].Source.Component != "evictiond" {
		t.Errorf("Evicted events %s, want exactly one, for filler, from evictiond", describeEvents(evicted))
	} else {
		t.Logf("filler evicted: %s", evicted[0].Message)
	}
	list := n.sh(t, "ctr -n k8s.io images list --quiet")
	for _, ref := range []string{workloadImage("idle"), workloadImage("memhog"), "e2e.evictiond.io/inuse:dev"} {
		if !strings.Contains(list, ref) {
			t.Errorf("image %s was collected (pinned or in use)", ref)
		}
	}
	t.Logf("evictiond:\n%s", grepLines(n.evictiondLog(t, 2000), "image"))
	if p, err := n.client.CoreV1().Pods(ns).Get(ctx, "inuse", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("the pod using the unpinned image hurt: %v %s", err, describeStatus(p))
	}
	_ = n.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// diskFree is the free space of the node's disk (/var/lib/kubelet and /var/lib/containerd).
func diskFree(t *testing.T, n *node) int64 {
	t.Helper()
	out := n.sh(t, "stat -fc '%a %S' /var/lib/containerd")
	var blocks, size int64
	if _, err := fmt.Sscan(out, &blocks, &size); err != nil {
		t.Fatalf("statfs of the node's disk: %q: %v", out, err)
	}
	return blocks * size
}
