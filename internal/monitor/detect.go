package monitor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// Detection of the node's cgroup layout: the cgroup version from the mount,
// the kubelet's cgroup driver from the kubepods cgroup it created, else from
// what the kubelet will use (the runtime's RuntimeConfig, which kubelet 1.34+
// takes over its own cgroupDriver; then the kubelet's configuration file), and
// whether that layout is confirmed (kubepods exists) or provisional (the
// kubelet has not created kubepods yet: detection runs again on every pass
// until it has).

// CgroupDriverAuto detects the driver (the default).
const CgroupDriverAuto CgroupDriver = "auto"

// ParseCgroupDriver checks a --cgroup-driver value; "" is auto.
func ParseCgroupDriver(s string) (CgroupDriver, error) {
	switch d := CgroupDriver(s); d {
	case "", CgroupDriverAuto:
		return CgroupDriverAuto, nil
	case CgroupDriverCgroupfs, CgroupDriverSystemd:
		return d, nil
	}
	return "", fmt.Errorf("--cgroup-driver %q: must be auto, cgroupfs or systemd", s)
}

// How a part of the layout was determined (CgroupInfo's DriverFrom and
// VersionFrom, the node_info metric's labels).
const (
	FromFlag           = "flag"           // --cgroup-driver or --cgroup-version
	FromMount          = "mount"          // cgroup.controllers (v2) or a memory controller directory (v1)
	FromCgroupTree     = "cgroupTree"     // the kubepods cgroup the kubelet created
	FromCRI            = "cri"            // the runtime's RuntimeConfig (what kubelet 1.34+ uses)
	FromKubeletConfig  = "kubeletConfig"  // cgroupDriver in the kubelet's configuration file
	FromSystemdRunning = "systemdRunning" // a guess: /run/systemd/system exists (systemd is init)
	FromDefault        = "default"        // a guess: cgroupfs
)

// kubeletConfig is the part of a KubeletConfiguration file detection reads.
type kubeletConfig struct {
	path                     string
	Kind                     string `json:"kind"`
	CgroupDriver             string `json:"cgroupDriver"`
	CgroupRoot               string `json:"cgroupRoot"`
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
}

// readKubeletConfig reads the kubelet's configuration file (YAML or JSON; path
// is the host's, read under hostRoot). A missing file is (nil, nil):
// detection goes on without it.
func readKubeletConfig(hostRoot, path string) (*kubeletConfig, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(nodefs.HostPath(hostRoot, path))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration %s: %w", path, err)
	}
	c := &kubeletConfig{path: path}
	if err := yaml.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("kubelet configuration %s: %w", path, err)
	}
	if c.Kind != "KubeletConfiguration" {
		return nil, fmt.Errorf("kubelet configuration %s: kind %q: must be KubeletConfiguration", path, c.Kind)
	}
	switch CgroupDriver(c.CgroupDriver) {
	case "", CgroupDriverCgroupfs, CgroupDriverSystemd:
	default:
		return nil, fmt.Errorf("kubelet configuration %s: cgroupDriver %q: must be cgroupfs or systemd", path, c.CgroupDriver)
	}
	return c, nil
}

// runtimeConfigReader is the CRI call the kubelet takes its cgroup driver
// from; reclaim.RuntimeStats and DialCRI's client have it.
type runtimeConfigReader interface {
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
}

// criCgroupDriver asks the runtime which cgroup driver it uses: "" when it
// cannot say (no runtime, down, an old runtime without RuntimeConfig).
func criCgroupDriver(ctx context.Context, rt RuntimeStats) (CgroupDriver, error) {
	r, ok := rt.(runtimeConfigReader)
	if !ok || rt == nil {
		return "", nil
	}
	resp, err := r.RuntimeConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("CRI RuntimeConfig: %w", err)
	}
	if resp.GetLinux() == nil {
		return "", nil
	}
	switch resp.GetLinux().GetCgroupDriver() {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return CgroupDriverSystemd, nil
	case runtimeapi.CgroupDriver_CGROUPFS:
		return CgroupDriverCgroupfs, nil
	}
	return "", nil
}

// detectInput is what layout detection goes by.
type detectInput struct {
	mountDir   string        // the cgroup mount, host root applied
	version    CgroupVersion // CgroupVersionAuto: from the mount
	driver     CgroupDriver  // CgroupDriverAuto: detected
	cgroupRoot string        // the kubelet's --cgroup-root; "": the kubelet config's cgroupRoot, else /
	kubelet    *kubeletConfig
	criDriver  CgroupDriver // "": the runtime did not say
	// systemdRunning: /run/systemd/system exists on the host, which is how
	// runc and the kubelet tell that systemd is init.
	systemdRunning bool
}

// detected is a layout and how it was found.
type detected struct {
	layout *cgroupLayout
	info   CgroupInfo
	// warnings are hints that disagree with the layout chosen, for the log.
	warnings []string
}

// hint is one source's word on the driver.
type hint struct {
	driver CgroupDriver
	from   string
	detail string
}

func (in detectInput) hints() []hint {
	var out []hint
	if in.criDriver != "" {
		out = append(out, hint{in.criDriver, FromCRI, "the runtime's RuntimeConfig"})
	}
	if in.kubelet != nil && in.kubelet.CgroupDriver != "" {
		out = append(out, hint{CgroupDriver(in.kubelet.CgroupDriver), FromKubeletConfig, "cgroupDriver in " + in.kubelet.path})
	}
	return out
}

// detectLayout decides the layout. The kubepods cgroup the kubelet created is
// the truth when it exists; an explicit --cgroup-driver that contradicts it,
// or (kubepods not there yet) contradicts the runtime or the kubelet's
// configuration, is an error. Without kubepods the layout is provisional
// (info.KubepodsFound false) and the caller detects again later.
func detectLayout(in detectInput) (detected, error) {
	var d detected
	version, versionFrom := in.version, FromFlag
	found, err := detectCgroupVersion(in.mountDir)
	switch {
	case version == CgroupVersionAuto && err != nil:
		return d, err
	case version == CgroupVersionAuto:
		version, versionFrom = found, FromMount
	case version != CgroupV1 && version != CgroupV2:
		return d, fmt.Errorf("--cgroup-version %d: must be 1, 2 or 0 (detect)", version)
	case err == nil && found != version:
		return d, fmt.Errorf("--cgroup-version %d: the cgroup mount %s is cgroup v%d", version, in.mountDir, found)
	}

	root := in.cgroupRoot
	if root == "" && in.kubelet != nil {
		root = in.kubelet.CgroupRoot
	}
	if root == "" {
		root = "/"
	}
	// Both candidates, and which of them the kubelet has created.
	candidates := map[CgroupDriver]*cgroupLayout{}
	exists := map[CgroupDriver]bool{}
	var candidateErr error
	for _, drv := range []CgroupDriver{CgroupDriverCgroupfs, CgroupDriverSystemd} {
		l, err := newCgroupLayout(version, drv, in.mountDir, root)
		if err != nil {
			// e.g. a --cgroup-root that is not a .slice cannot be systemd's.
			candidateErr = err
			continue
		}
		candidates[drv] = l
		if st, err := os.Stat(l.dir("memory", l.kubepods)); err == nil && st.IsDir() {
			exists[drv] = true
		}
	}
	describe := func(drv CgroupDriver) string {
		if l := candidates[drv]; l != nil {
			return l.kubepods
		}
		return "(none)"
	}
	choose := func(drv CgroupDriver, from string) (detected, error) {
		l := candidates[drv]
		if l == nil {
			return d, fmt.Errorf("cgroup driver %s: %w", drv, candidateErr)
		}
		d.layout = l
		d.info = CgroupInfo{Version: version, VersionFrom: versionFrom, Driver: drv, DriverFrom: from,
			Kubepods: l.kubepods, KubepodsFound: exists[drv], CgroupRoot: root}
		for _, h := range in.hints() {
			if h.driver != drv {
				d.warnings = append(d.warnings, fmt.Sprintf("%s says %s, but %s (%s) is used", h.detail, h.driver, drv, from))
			}
		}
		return d, nil
	}
	other := func(drv CgroupDriver) CgroupDriver {
		if drv == CgroupDriverSystemd {
			return CgroupDriverCgroupfs
		}
		return CgroupDriverSystemd
	}

	if in.driver == CgroupDriverCgroupfs || in.driver == CgroupDriverSystemd {
		o := other(in.driver)
		switch {
		case exists[in.driver]:
		case exists[o]:
			return d, fmt.Errorf("--cgroup-driver %s: this node's kubepods cgroup is %s (the %s driver's) under %s, and %s does not exist; "+
				"drop the flag (auto) or set --cgroup-driver %s", in.driver, describe(o), o, in.mountDir, describe(in.driver), o)
		default:
			for _, h := range in.hints() {
				if h.driver != in.driver {
					return d, fmt.Errorf("--cgroup-driver %s: %s says %s (no kubepods cgroup yet under %s to tell); "+
						"drop the flag (auto) or set --cgroup-driver %s", in.driver, h.detail, h.driver, in.mountDir, h.driver)
				}
			}
		}
		return choose(in.driver, FromFlag)
	}
	if in.driver != CgroupDriverAuto && in.driver != "" {
		return d, fmt.Errorf("--cgroup-driver %q: must be auto, cgroupfs or systemd", in.driver)
	}

	hints := in.hints()
	switch {
	case exists[CgroupDriverCgroupfs] && exists[CgroupDriverSystemd]:
		// A leftover of an earlier driver: the runtime or kubelet config decides.
		if len(hints) > 0 {
			return choose(hints[0].driver, hints[0].from)
		}
		return d, fmt.Errorf("--cgroup-driver auto: both %s and %s exist under %s and neither the runtime nor a kubelet configuration says which the kubelet uses; set --cgroup-driver",
			describe(CgroupDriverCgroupfs), describe(CgroupDriverSystemd), in.mountDir)
	case exists[CgroupDriverCgroupfs]:
		return choose(CgroupDriverCgroupfs, FromCgroupTree)
	case exists[CgroupDriverSystemd]:
		return choose(CgroupDriverSystemd, FromCgroupTree)
	}
	// No kubepods yet: the kubelet's future choice, else a guess.
	for _, h := range hints {
		if candidates[h.driver] != nil {
			return choose(h.driver, h.from)
		}
	}
	if in.systemdRunning && candidates[CgroupDriverSystemd] != nil {
		return choose(CgroupDriverSystemd, FromSystemdRunning)
	}
	if candidates[CgroupDriverCgroupfs] != nil {
		return choose(CgroupDriverCgroupfs, FromDefault)
	}
	return choose(CgroupDriverSystemd, FromDefault)
}

// systemdRunning tells whether systemd is the host's init, as runc's
// IsRunningSystemd does (the directory exists only under systemd).
func systemdRunning(hostRoot string) bool {
	st, err := os.Stat(nodefs.HostPath(hostRoot, "/run/systemd/system"))
	return err == nil && st.IsDir()
}

// RuntimeEndpoint is the CRI socket evictiond talks to and how it was chosen.
type RuntimeEndpoint struct {
	// Endpoint is the address to dial from this process (unix://...): the
	// host's socket path, or that path under the host root when only the
	// host root mount shows it.
	Endpoint string `json:"endpoint"`
	// HostPath is the socket's path on the host.
	HostPath string `json:"hostPath"`
	// Runtime names the runtime by its socket: containerd, crio, cri-dockerd,
	// or unknown.
	Runtime string `json:"runtime"`
	// From is how it was chosen: configuration, kubeletConfig (its
	// containerRuntimeEndpoint), socket (the first well-known socket found),
	// or default (none found: containerd's path).
	From string `json:"from"`
}

// Runtime endpoint sources (RuntimeEndpoint.From).
const (
	RuntimeFromConfiguration = "configuration"
	RuntimeFromKubeletConfig = FromKubeletConfig
	RuntimeFromSocket        = "socket"
	RuntimeFromDefault       = FromDefault
)

// wellKnownRuntimeSockets are the CRI sockets tried in order when none is
// configured: containerd (1.x and 2.x), CRI-O, k3s/rke2's containerd,
// cri-dockerd.
var wellKnownRuntimeSockets = []string{
	"/run/containerd/containerd.sock",
	"/run/crio/crio.sock",
	"/var/run/crio/crio.sock",
	"/run/k3s/containerd/containerd.sock",
	"/run/cri-dockerd.sock",
}

// DefaultKubeletConfigFile is where kubeadm writes the kubelet's configuration.
const DefaultKubeletConfigFile = "/var/lib/kubelet/config.yaml"

// DetectRuntimeEndpoint picks the CRI socket when none is configured: the
// kubelet configuration's containerRuntimeEndpoint (kubeletConfigFile, a host
// path; "" skips it), else the first well-known socket that exists. Each host
// path is looked for as is (a DaemonSet mounts the socket's directory at the
// same path) and then under hostRoot. configured, when not empty, is used as
// it is.
func DetectRuntimeEndpoint(configured, hostRoot, kubeletConfigFile string) (RuntimeEndpoint, error) {
	if configured != "" {
		return RuntimeEndpoint{Endpoint: configured, HostPath: strings.TrimPrefix(configured, "unix://"),
			Runtime: runtimeName(configured), From: RuntimeFromConfiguration}, nil
	}
	kc, kcErr := readKubeletConfig(hostRoot, kubeletConfigFile)
	if kc != nil && kc.ContainerRuntimeEndpoint != "" {
		p := strings.TrimPrefix(kc.ContainerRuntimeEndpoint, "unix://")
		if !strings.HasPrefix(p, "/") {
			return RuntimeEndpoint{}, fmt.Errorf("kubelet configuration %s: containerRuntimeEndpoint %q: must be a unix socket", kc.path, kc.ContainerRuntimeEndpoint)
		}
		if seen, ok := findSocket(p, hostRoot); ok {
			return RuntimeEndpoint{Endpoint: "unix://" + seen, HostPath: p, Runtime: runtimeName(p), From: RuntimeFromKubeletConfig}, nil
		}
	}
	for _, p := range wellKnownRuntimeSockets {
		if seen, ok := findSocket(p, hostRoot); ok {
			return RuntimeEndpoint{Endpoint: "unix://" + seen, HostPath: p, Runtime: runtimeName(p), From: RuntimeFromSocket}, kcErr
		}
	}
	p := wellKnownRuntimeSockets[0]
	return RuntimeEndpoint{Endpoint: "unix://" + p, HostPath: p, Runtime: runtimeName(p), From: RuntimeFromDefault}, kcErr
}

// processRoot is where findSocket looks first: this process's own root (the
// chart mounts the runtime's socket directory at its host path). Tests move it.
var processRoot = "/"

// findSocket looks for a host's socket where this process can reach it.
func findSocket(hostPath, hostRoot string) (string, bool) {
	for _, p := range []string{nodefs.HostPath(processRoot, hostPath), nodefs.HostPath(hostRoot, hostPath)} {
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
			return p, true
		}
		if hostRoot == "" {
			break
		}
	}
	return "", false
}

// runtimeName names the runtime behind a socket path, for labels and logs.
func runtimeName(endpoint string) string {
	base := filepath.Base(strings.TrimPrefix(endpoint, "unix://"))
	switch {
	case strings.Contains(base, "containerd"):
		return "containerd"
	case strings.Contains(base, "crio"):
		return "crio"
	case strings.Contains(base, "cri-dockerd"):
		return "cri-dockerd"
	}
	return "unknown"
}
