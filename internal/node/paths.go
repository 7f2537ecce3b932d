package node

import (
	"github.com/spf13/pflag"

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
	// KubeletConfig is the kubelet's configuration file (a host path), read
	// for its cgroupDriver, cgroupRoot and containerRuntimeEndpoint.
	KubeletConfig string
}

// AddFlags declares the node's flags on fs.
func (p *Paths) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&p.HostRoot, "host-root", "", "where the host's root is mounted (e.g. /host in the DaemonSet); prefixes /proc, /sys, the kubelet root and /var/log/pods")
	fs.StringVar(&p.KubeletRootDir, "kubelet-root-dir", nodefs.DefaultKubeletRootDir, "the kubelet's root dir (nodefs, pod volumes)")
	fs.StringVar(&p.PodLogsDir, "pod-logs-dir", nodefs.DefaultPodLogsDir, "the kubelet's pod log dir")
	fs.StringVar(&p.ImageFsDir, "image-fs-dir", nodefs.DefaultImageFsDir, "the runtime's image store, read when the CRI cannot say")
	fs.StringVar(&p.CgroupDriver, "cgroup-driver", string(monitor.CgroupDriverAuto), "the kubelet's cgroup driver: auto (detected from the kubepods cgroup, else the runtime's RuntimeConfig, else the kubelet config; re-detected every pass until kubepods exists), cgroupfs or systemd (a value the node contradicts fails start-up)")
	fs.StringVar(&p.CgroupRoot, "cgroup-root", "", "the kubelet's --cgroup-root (default: the kubelet config's cgroupRoot, else /)")
	fs.StringVar(&p.KubeletConfig, "kubelet-config", monitor.DefaultKubeletConfigFile, "the kubelet's configuration file, a host path read under --host-root, for its cgroupDriver, cgroupRoot and containerRuntimeEndpoint; empty: none")
}

// Validate checks what the flags cannot.
func (p Paths) Validate() error {
	_, err := monitor.ParseCgroupDriver(p.CgroupDriver)
	return err
}

// CgroupMount is the host's cgroup mount as the process sees it (under
// --host-root), where the cgroup version is read.
func (p Paths) CgroupMount() string {
	return nodefs.HostPath(p.HostRoot, "/sys/fs/cgroup")
}

// DetectRuntime is the CRI socket to use: configured when set, else the one
// found on the node (the kubelet config's containerRuntimeEndpoint, then the
// runtimes' usual sockets); monitor.DetectRuntimeEndpoint says how.
func (p Paths) DetectRuntime(configured string) (monitor.RuntimeEndpoint, error) {
	return monitor.DetectRuntimeEndpoint(configured, p.HostRoot, p.KubeletConfig)
}

// MonitorConfig is the monitor's configuration for these paths; the caller
// adds what is not a path (formula, housekeeping, runtime, logger).
func (p Paths) MonitorConfig() monitor.Config {
	return monitor.Config{HostRoot: p.HostRoot, KubeletRootDir: p.KubeletRootDir, PodLogsDir: p.PodLogsDir,
		ImageFsDir: p.ImageFsDir, CgroupDriver: monitor.CgroupDriver(p.CgroupDriver), CgroupRoot: p.CgroupRoot,
		KubeletConfigFile: p.KubeletConfig}
}
