//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// diskAvailable is statfs' bavail in bytes for the filesystem holding dir, as evictiond and
// cAdvisor read nodefs.available.
func diskAvailable(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * int64(st.Frsize)
}

// listedImages returns the references of the images the node's containerd holds.
func listedImages(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	out, err := c.Containerd.Ctr(context.Background(), "images", "list", "--quiet")
	if err != nil {
		t.Fatalf("listing images: %v", err)
	}
	return strings.Fields(string(out))
}

// testDiskPressure is scenario 3: with nodefs thresholds set relative to the free space the
// disk has now, a pod filling an emptyDir first makes evictiond garbage-collect the unused
// images (node-level reclaim), and, when that is not enough, evicts the pod — the images are
// gone before any pod is evicted, and exactly one pod is evicted.
func testDiskPressure(t *testing.T, c *cluster.Cluster) {
	replayAfter(t, c, "evictiond")
	const ns = "e2e-disk"
	ctx := context.Background()
	createNamespace(t, c.Client, ns)

	// Three unused images of 200 MiB each: about 1.2 GiB on disk (content + snapshot).
	var unused []string
	for i := range 3 {
		spec, err := images.Busybox(fmt.Sprintf("e2e.evictiond.io/unused-%d:dev", i), "/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		spec.Files = append(spec.Files, images.Padding("/pad", 200<<20, spec.Ref))
		if _, err := images.Import(ctx, c.Containerd.Socket, containerd.CRINamespace, spec); err != nil {
			t.Fatal(err)
		}
		unused = append(unused, spec.Ref)
	}
	// imageGC.minAge is 10 s in the e2e config: let evictiond see them and let them age.
	time.Sleep(15 * time.Second)

	cm, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["config.yaml"]
	t.Cleanup(func() { setEvictiondConfig(t, c, original) })
	// The threshold sits 1 GiB below today's free space: the filler crosses it after 1 GiB;
	// image GC (asked for 1 GiB more by the minimum reclaim) frees the ~1.2 GiB of unused
	// images; the filler crosses again ~1.2 GiB later, and then only an eviction helps.
	free := diskAvailable(t, c.KubeletRootDir)
	threshold := free - 1<<30
	thresholdMi := fmt.Sprintf("%dMi", threshold>>20)
	edited := strings.Replace(original, "nodefs.available: 2%", "nodefs.available: "+thresholdMi, 1)
	edited = strings.Replace(edited, "imagefs.available: 2%", "imagefs.available: "+thresholdMi, 1)
	edited = strings.Replace(edited, "evictionMinimumReclaim:\n", "evictionMinimumReclaim:\n  nodefs.available: 1Gi\n  imagefs.available: 1Gi\n", 1)
	if !strings.Contains(edited, "nodefs.available: "+thresholdMi) || !strings.Contains(edited, "nodefs.available: 1Gi") {
		t.Fatalf("could not set the disk thresholds in the e2e config:\n%s", edited)
	}
	setEvictiondConfig(t, c, edited)
	waitConfigApplied(t, c, `evictiond_threshold_bytes{kind="hard",signal="nodefs.available"}`, float64(threshold>>20<<20))

	bystander := podOnNode(ns, "bystander", workloadContainer("idle", nil, resources("cpu", "10m", "memory", "16Mi"), nil))
	filler := podOnNode(ns, "filler", workloadContainer("diskfill", []string{"-dir=/scratch", "-rate-mib=150", "-target-mib=6144"},
		resources("cpu", "100m", "memory", "64Mi"), nil))
	filler.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	filler.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, bystander, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, ns, "bystander", time.Minute, "Ready", podReady)
	created, err := c.Client.CoreV1().Pods(ns).Create(ctx, filler, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Watch the images while the filler runs: when did the last unused one go?
	var imagesGoneAt time.Time
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			out, err := c.Containerd.Ctr(context.Background(), "images", "list", "--quiet")
			if err != nil {
				continue
			}
			left := 0
			for _, ref := range unused {
				if strings.Contains(string(out), ref) {
					left++
				}
			}
			if left == 0 {
				imagesGoneAt = time.Now()
				return
			}
		}
	}()
	waitPodGone(t, c, ns, "filler", created.UID, 3*time.Minute)
	close(stop)
	<-done

	writes := auditedPodWrites(t, c.API.AuditLogPath, ns)
	var evictedAt time.Time
	for _, w := range writes {
		if w.Subresource == "eviction" && w.Name == "filler" && w.Code == 201 {
			evictedAt = w.At
			break
		}
	}
	if evictedAt.IsZero() {
		t.Fatalf("filler gone without an eviction through the API (writes: %v)", writes)
	}
	if imagesGoneAt.IsZero() {
		t.Errorf("unused images still listed after the eviction: %v", listedImages(t, c))
	} else if !imagesGoneAt.Before(evictedAt) {
		t.Errorf("the unused images went at %s, after the filler's eviction at %s: reclaim must come first",
			imagesGoneAt.Format(time.RFC3339Nano), evictedAt.Format(time.RFC3339Nano))
	}
	evicted := evictionEvents(t, c, ns)
	if len(evicted) != 1 || evicted[0].InvolvedObject.Name != "filler" {
		t.Errorf("Evicted events %s, want exactly one, for filler", describeEvents(evicted))
	} else {
		t.Logf("filler evicted %s after the unused images were collected: %s", evictedAt.Sub(imagesGoneAt).Round(time.Millisecond), evicted[0].Message)
	}
	if lines, err := evictiondMetrics(c, "evictiond_reclaim_bytes_total"); err == nil {
		t.Logf("reclaim metrics: %v", lines)
	}
	for _, ref := range []string{cluster.WorkloadImage("idle"), cluster.WorkloadImage("memhog"), cluster.EvictiondImage} {
		if !strings.Contains(strings.Join(listedImages(t, c), " "), ref) {
			t.Errorf("pinned image %s was collected", ref)
		}
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "bystander", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("bystander hurt: %v %s", err, describeStatus(p))
	}
}
