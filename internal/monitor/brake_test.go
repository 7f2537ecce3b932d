package monitor

import (
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/evictiond/evictiond/internal/brake"
)

func TestFixturePodCgroupForTheBrake(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: podBurstable}, Status: v1.PodStatus{QOSClass: v1.PodQOSBurstable}}
	cases := []struct {
		tree   string
		driver CgroupDriver
		want   brake.PodCgroup
	}{
		{"v1-cgroupfs", CgroupDriverCgroupfs, brake.PodCgroup{Version: brake.V1,
			Dir: "testdata/v1-cgroupfs/sys/fs/cgroup/freezer/kubepods/burstable/pod0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111"}},
		{"v2-systemd", CgroupDriverSystemd, brake.PodCgroup{Version: brake.V2,
			Dir: "testdata/v2-systemd/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e7f5a36_9c1e_4f53_9d0a_7f8ac2a1b111.slice"}},
	}
	for _, tc := range cases {
		got, err := fixtureMonitor(t, tc.tree, tc.driver, nil).PodCgroup(pod)
		if err != nil {
			t.Fatalf("%s: %v", tc.tree, err)
		}
		if got.Version != tc.want.Version || filepath.Clean(got.Dir) != filepath.Clean(tc.want.Dir) {
			t.Errorf("%s: %+v, want %+v", tc.tree, got, tc.want)
		}
	}
}
