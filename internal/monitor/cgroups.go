package monitor

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// cgroupLayout knows where the kubelet puts pod cgroups for one driver and
// one cgroup version, and where each controller's files are.
type cgroupLayout struct {
	version CgroupVersion
	driver  CgroupDriver
	// mountDir is the cgroup mount as this process sees it (host root applied),
	// e.g. /host/sys/fs/cgroup.
	mountDir string
	// kubepods is the path of the pod cgroup root inside the hierarchy, e.g.
	// /kubepods or /kubepods.slice.
	kubepods string
	// nameParts is kubepods as the kubelet's CgroupName (cgroup root + "kubepods").
	nameParts []string
	// files reads the cgroup files, keeping the node-level ones open (the
	// monitor's, set when it takes the layout; nil keeps nothing).
	files *nodefs.Files
	// keepDirs are the directories whose files files keeps: the root
	// memory cgroup's and kubepods' (Monitor.keepOpen), each ending in "/".
	keepDirs []string
}

// detectCgroupVersion reports v2 when the mount is the unified hierarchy (it
// has cgroup.controllers at its root) and v1 otherwise; a hybrid host, with an
// empty cgroup2 under /sys/fs/cgroup/unified, is v1 for memory and pids.
func detectCgroupVersion(mountDir string) (CgroupVersion, error) {
	if _, err := os.Stat(filepath.Join(mountDir, "cgroup.controllers")); err == nil {
		return CgroupV2, nil
	}
	if _, err := os.Stat(filepath.Join(mountDir, "memory")); err == nil {
		return CgroupV1, nil
	}
	return 0, fmt.Errorf("detecting cgroup version under %s: neither cgroup.controllers (v2) nor a memory controller directory (v1) exists", mountDir)
}

func newCgroupLayout(version CgroupVersion, driver CgroupDriver, mountDir, cgroupRoot string) (*cgroupLayout, error) {
	if version == CgroupVersionAuto {
		v, err := detectCgroupVersion(mountDir)
		if err != nil {
			return nil, err
		}
		version = v
	}
	if version != CgroupV1 && version != CgroupV2 {
		return nil, fmt.Errorf("cgroupVersion %d: must be 1, 2 or 0 (detect)", version)
	}
	parts, err := cgroupNameParts(cgroupRoot, driver)
	if err != nil {
		return nil, err
	}
	parts = append(parts, "kubepods")
	l := &cgroupLayout{version: version, driver: driver, mountDir: mountDir, nameParts: parts}
	l.kubepods, err = l.cgroupPath(parts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// cgroupNameParts splits the kubelet's --cgroup-root into CgroupName parts: for
// cgroupfs "/a/b" -> [a b]; for systemd "/a.slice/a-b.slice" -> [a b], as the
// kubelet's ParseSystemdToCgroupName does.
func cgroupNameParts(cgroupRoot string, driver CgroupDriver) ([]string, error) {
	if cgroupRoot == "" || cgroupRoot == "/" {
		return nil, nil
	}
	if !strings.HasPrefix(cgroupRoot, "/") {
		return nil, fmt.Errorf("cgroupRoot %q: must be an absolute cgroup path", cgroupRoot)
	}
	switch driver {
	case CgroupDriverCgroupfs:
		return strings.Split(strings.Trim(path.Clean(cgroupRoot), "/"), "/"), nil
	case CgroupDriverSystemd:
		last := path.Base(cgroupRoot)
		if !strings.HasSuffix(last, ".slice") {
			return nil, fmt.Errorf("cgroupRoot %q: with the systemd driver it must end in a .slice", cgroupRoot)
		}
		var parts []string
		for _, p := range strings.Split(strings.TrimSuffix(last, ".slice"), "-") {
			parts = append(parts, strings.ReplaceAll(p, "_", "-"))
		}
		return parts, nil
	default:
		return nil, fmt.Errorf("cgroupDriver %q: must be %q or %q", driver, CgroupDriverCgroupfs, CgroupDriverSystemd)
	}
}

// cgroupPath renders a kubelet CgroupName as a path in the hierarchy, as the
// kubelet's ToCgroupfs and ToSystemd do: systemd turns [kubepods burstable
// pod1-2] into /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice.
func (l *cgroupLayout) cgroupPath(parts []string) (string, error) {
	switch l.driver {
	case CgroupDriverCgroupfs:
		return "/" + strings.Join(parts, "/"), nil
	case CgroupDriverSystemd:
		var b strings.Builder
		prefix := ""
		for _, p := range parts {
			unit := strings.ReplaceAll(p, "-", "_")
			if prefix != "" {
				unit = prefix + "-" + unit
			}
			prefix = unit
			b.WriteString("/" + unit + ".slice")
		}
		if b.Len() == 0 {
			return "/", nil
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("cgroupDriver %q: must be %q or %q", l.driver, CgroupDriverCgroupfs, CgroupDriverSystemd)
	}
}

// podCgroupPath is the cgroup of a pod by QoS tier: Guaranteed pods sit
// directly under kubepods, Burstable and BestEffort under their tier.
func (l *cgroupLayout) podCgroupPath(uid types.UID, qos string) (string, error) {
	parts := append([]string(nil), l.nameParts...)
	switch v1.PodQOSClass(qos) {
	case v1.PodQOSGuaranteed:
	case v1.PodQOSBurstable:
		parts = append(parts, "burstable")
	case v1.PodQOSBestEffort:
		parts = append(parts, "besteffort")
	default:
		return "", fmt.Errorf("pod %s qosClass %q: must be Guaranteed, Burstable or BestEffort", uid, qos)
	}
	parts = append(parts, "pod"+string(uid))
	return l.cgroupPath(parts)
}

// dir is the directory of a cgroup for a controller ("memory", "pids"); on v2
// every controller shares one directory.
func (l *cgroupLayout) dir(controller, cgroupPath string) string {
	if l.version == CgroupV2 {
		return filepath.Join(l.mountDir, cgroupPath)
	}
	return filepath.Join(l.mountDir, controller, cgroupPath)
}

// A pod's cgroup is named "pod"+UID whatever the UID's form (the kubelet's
// GetPodCgroupNameSuffix): a UUID from the API server, a 32-hex-digit hash for a
// static pod (fnv128a of the manifest), or the manifest's own metadata.uid. The
// systemd driver escapes each CgroupName part ("-" -> "_") and joins the parts
// with "-" (ToSystemd), so a pod is a child slice "<parent unit>-pod<uid with _>.slice"
// and its escaped UID has no "-". Only UID characters are accepted, so the tier
// cgroups (burstable, besteffort) and anything else under kubepods are not pods.
var (
	cgroupfsPodDir = regexp.MustCompile(`^pod([0-9A-Za-z][0-9A-Za-z_-]*)$`)
	systemdPodUnit = regexp.MustCompile(`^pod([0-9A-Za-z][0-9A-Za-z_]*)\.slice$`)
)

// podUIDFromDir recognises a pod cgroup directory name under the cgroup
// parentPath (a tier or kubepods itself) and returns its UID.
func (l *cgroupLayout) podUIDFromDir(parentPath, name string) (types.UID, bool) {
	if l.driver == CgroupDriverSystemd {
		// The parent's unit name is the child's prefix: kubepods-burstable.slice
		// holds kubepods-burstable-pod<uid>.slice.
		parentUnit := strings.TrimSuffix(path.Base(parentPath), ".slice")
		rest, ok := strings.CutPrefix(name, parentUnit+"-")
		if !ok {
			return "", false
		}
		m := systemdPodUnit.FindStringSubmatch(rest)
		if m == nil {
			return "", false
		}
		return types.UID(strings.ReplaceAll(m[1], "_", "-")), true
	}
	m := cgroupfsPodDir.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return types.UID(m[1]), true
}

// discoverPods lists the pod cgroups under kubepods in every QoS tier, for
// when no pod list is at hand (observe without an API server).
func (l *cgroupLayout) discoverPods() ([]PodCgroup, error) {
	tiers := []struct {
		qos  v1.PodQOSClass
		name []string
	}{
		{v1.PodQOSGuaranteed, nil},
		{v1.PodQOSBurstable, []string{"burstable"}},
		{v1.PodQOSBestEffort, []string{"besteffort"}},
	}
	var found []PodCgroup
	for _, tier := range tiers {
		tierPath, err := l.cgroupPath(append(append([]string(nil), l.nameParts...), tier.name...))
		if err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(l.dir("memory", tierPath))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && tier.qos != v1.PodQOSGuaranteed {
				continue
			}
			return nil, fmt.Errorf("listing pod cgroups: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			uid, ok := l.podUIDFromDir(tierPath, e.Name())
			if !ok {
				continue
			}
			found = append(found, PodCgroup{
				Pod:  PodRef{UID: uid, QOSClass: string(tier.qos)},
				Path: path.Join(tierPath, e.Name()),
			})
		}
	}
	return found, nil
}
