package node

import (
	"flag"
	"fmt"

	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/nodefs"
)

// Paths say where the node's files are and how its cgroups are named: the
// command line of every subcommand that reads the node (`run`, `observe`),
// declared once here.
type Paths struct {
	// HostRoot is where the host's root is mounted (/host in the DaemonSet);
	// it prefixes /proc, /sys, the kubelet root and the pod logs.
	HostRoot       string
	KubeletRootDir string
	PodLogsDir     string
	ImageFsDir     string
	CgroupDriver   string
	CgroupRoot     string
}

// AddFlags declares the node's flags on fs.
func (p *Paths) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.HostRoot, "host-root", "", "where the host's root is mounted (e.g. /host in the DaemonSet); prefixes /proc, /sys, the kubelet root and /var/log/pods")
	fs.StringVar(&p.KubeletRootDir, "kubelet-root-dir", nodefs.DefaultKubeletRootDir, "the kubelet's root dir (nodefs, pod volumes)")
	fs.StringVar(&p.PodLogsDir, "pod-logs-dir", nodefs.DefaultPodLogsDir, "the kubelet's pod log dir")
	fs.StringVar(&p.ImageFsDir, "image-fs-dir", nodefs.DefaultImageFsDir, "the runtime's image store, read when the CRI cannot say")
	fs.StringVar(&p.CgroupDriver, "cgroup-driver", string(monitor.CgroupDriverCgroupfs), "the kubelet's cgroup driver: cgroupfs or systemd")
	fs.StringVar(&p.CgroupRoot, "cgroup-root", "/", "the kubelet's --cgroup-root")
}

// Validate checks what the flags cannot.
func (p Paths) Validate() error {
	switch monitor.CgroupDriver(p.CgroupDriver) {
	case monitor.CgroupDriverCgroupfs, monitor.CgroupDriverSystemd:
		return nil
	}
	return fmt.Errorf("--cgroup-driver: value %q: must be cgroupfs or systemd", p.CgroupDriver)
}

// MonitorConfig is the monitor's configuration for these paths; the caller
// adds what is not a path (formula, housekeeping, runtime, logger).
func (p Paths) MonitorConfig() monitor.Config {
	return monitor.Config{HostRoot: p.HostRoot, KubeletRootDir: p.KubeletRootDir, PodLogsDir: p.PodLogsDir,
		ImageFsDir: p.ImageFsDir, CgroupDriver: monitor.CgroupDriver(p.CgroupDriver), CgroupRoot: p.CgroupRoot}
}
