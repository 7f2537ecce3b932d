package monitor

import (
	"fmt"
	"time"

	"github.com/google/cadvisor/cache/memory"
	"github.com/google/cadvisor/container"
	cadvisorv2 "github.com/google/cadvisor/info/v2"
	"github.com/google/cadvisor/manager"
	"github.com/google/cadvisor/utils/sysfs"
)

// cadvisorMetrics is all evictiond asks of cAdvisor's housekeeping: the
// machine's filesystems. Every other metric stays off, and with it the cgroup
// controllers cAdvisor would read for each watched cgroup (memory, cpu,
// cpuacct, pids, blkio, hugetlb, cpuset, perf_event): the memory signals and
// per-pod memory and process counts are read fresh from cgroupfs instead. With
// memory on, housekeeping 100 pod cgroups every 10 s cost about 5% of a core on
// cgroup v1 (opencontainers/cgroups reads some 20 files per memcg); without it
// the watch is bookkeeping only.
var cadvisorMetrics = container.MetricSet{
	container.DiskUsageMetrics: struct{}{},
}

// embeddedCAdvisor is cAdvisor's manager with only the raw cgroup factory
// (no docker, containerd, crio, mesos or systemd factory is linked in),
// watching the root cgroup and, when asked, every cgroup under kubepods.
type embeddedCAdvisor struct {
	mgr manager.Manager
}

// startCAdvisor starts cAdvisor watching "/" and every cgroup under the
// watchPrefixes (none: the root cgroup only), housekeeping each at most every
// interval. The stats cache keeps only a few intervals: evictiond reads the
// latest values, never history.
func startCAdvisor(interval time.Duration, watchPrefixes []string) (*embeddedCAdvisor, error) {
	cache := memory.New(3*interval, nil)
	allowDynamic := false
	mgr, err := manager.New(cache, sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: &interval, AllowDynamic: &allowDynamic},
		cadvisorMetrics, nil, watchPrefixes, nil, "", 0)
	if err != nil {
		return nil, fmt.Errorf("creating the cAdvisor manager: %w", err)
	}
	if err := mgr.Start(); err != nil {
		return nil, fmt.Errorf("starting the cAdvisor manager: %w", err)
	}
	c := &embeddedCAdvisor{mgr: mgr}
	// Filesystem figures come from the root container's housekeeping; wait
	// (bounded) for the first one so the first pass has them.
	deadline := time.Now().Add(firstHousekeepingWait)
	for !c.hasRootStats() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return c, nil
}

const firstHousekeepingWait = 5 * time.Second

func (c *embeddedCAdvisor) hasRootStats() bool {
	infos, err := c.mgr.GetContainerInfoV2("/", cadvisorv2.RequestOptions{IdType: cadvisorv2.TypeName, Count: 1})
	if err != nil {
		return false
	}
	root, ok := infos["/"]
	return ok && len(root.Stats) > 0
}

func (c *embeddedCAdvisor) stop() error {
	if err := c.mgr.Stop(); err != nil {
		return fmt.Errorf("stopping the cAdvisor manager: %w", err)
	}
	return nil
}

// dirFsInfo is cAdvisor's view of the filesystem holding dir (its
// GetDirFsInfo, as the kubelet's RootFsInfo and ImagesFsInfo use it). The
// figures are from the root container's last housekeeping: fi.Timestamp says
// when.
func (c *embeddedCAdvisor) dirFsInfo(dir string) (cadvisorv2.FsInfo, error) {
	fi, err := c.mgr.GetDirFsInfo(dir)
	if err != nil {
		return cadvisorv2.FsInfo{}, fmt.Errorf("cAdvisor filesystem of %s: %w", dir, err)
	}
	return fi, nil
}

// watchedContainers lists the cgroups cAdvisor currently tracks under name.
func (c *embeddedCAdvisor) watchedContainers(name string) ([]string, error) {
	infos, err := c.mgr.GetContainerInfoV2(name, cadvisorv2.RequestOptions{IdType: cadvisorv2.TypeName, Count: 1, Recursive: true})
	if err != nil {
		return nil, fmt.Errorf("cAdvisor containers under %s: %w", name, err)
	}
	out := make([]string, 0, len(infos))
	for n := range infos {
		out = append(out, n)
	}
	return out, nil
}
