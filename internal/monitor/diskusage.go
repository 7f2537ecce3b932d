package monitor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// diskUsage is what a walk of a directory found: du's bytes (allocated
// blocks, hard links once) and the inodes it holds.
type diskUsage struct {
	bytes  int64
	inodes int64
}

var errWalkBound = errors.New("walk bound reached")

// duDir measures a directory tree as du -x does: st_blocks*512 of every entry,
// hard links counted once, no descent into other filesystems. It stops with an
// error after maxEntries entries, so one pod with millions of files cannot
// stall a pass: its usage is then missing, not a partial (wrong) figure.
func duDir(dir string, maxEntries int) (diskUsage, error) {
	var u diskUsage
	var rootDev uint64
	seen := map[[2]uint64]bool{}
	entries := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil // removed while walking
			}
			return err
		}
		entries++
		if maxEntries > 0 && entries > maxEntries {
			return errWalkBound
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("no stat_t for %s", p)
		}
		if p == dir {
			rootDev = st.Dev
		} else if st.Dev != rootDev {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			key := [2]uint64{st.Dev, st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		u.bytes += st.Blocks * 512
		u.inodes++
		return nil
	})
	if errors.Is(err, errWalkBound) {
		return diskUsage{}, fmt.Errorf("measuring %s: more than %d entries (stats.maxWalkEntries)", dir, maxEntries)
	}
	if errors.Is(err, fs.ErrPermission) {
		// Never a partial figure: the tree is reported unmeasured.
		return diskUsage{}, fmt.Errorf("measuring %s: %w (reading other users' directories needs CAP_DAC_READ_SEARCH)", dir, err)
	}
	if err != nil {
		return diskUsage{}, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return u, nil
}

// localVolumePlugins are the kubelet's "local" volumes for ranking and
// emptyDir limits (localVolumeNames / IsLocalEphemeralVolume): emptyDir,
// ConfigMap and GitRepo keep their data under the pod's directory.
var localVolumePlugins = []string{"kubernetes.io~empty-dir", "kubernetes.io~configmap", "kubernetes.io~git-repo"}

const tmpfsMagic = 0x01021994

// podDisk is one pod's disk usage from one walk.
type podDisk struct {
	time time.Time
	// podLogs is the whole /var/log/pods/<ns>_<name>_<uid> directory;
	// containerLogs splits it by container.
	podLogs       *diskUsage
	containerLogs map[string]diskUsage
	volumes       map[string]diskUsage
	// memoryBacked volumes (tmpfs emptyDir) are measured for sizeLimit checks
	// but are memory, not ephemeral storage.
	memoryBacked map[string]bool
	etcHosts     *diskUsage
	errs         []string
	// built is what an idle pass made of this measurement (addDiskUsage).
	built *builtDisk
}

// diskWalker measures pods' logs and local volumes.
type diskWalker struct {
	kubeletRootDir string // host root applied
	podLogsDir     string // host root applied
	maxEntries     int
}

// podLogDir finds /var/log/pods/<namespace>_<name>_<uid>; with a name known
// it is direct, otherwise it is found by its UID suffix.
func (w *diskWalker) podLogDir(pod PodRef, listing []os.DirEntry) string {
	if pod.Namespace != "" && pod.Name != "" {
		return filepath.Join(w.podLogsDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.runtimeUID()))
	}
	suffix := "_" + string(pod.runtimeUID())
	for _, e := range listing {
		if e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
			return filepath.Join(w.podLogsDir, e.Name())
		}
	}
	return ""
}

func (w *diskWalker) measure(pod PodRef, logListing []os.DirEntry) podDisk {
	d := podDisk{time: time.Now(), containerLogs: map[string]diskUsage{}, volumes: map[string]diskUsage{}, memoryBacked: map[string]bool{}}
	if dir := w.podLogDir(pod, logListing); dir != "" {
		if u, err := duDir(dir, w.maxEntries); err == nil {
			d.podLogs = &u
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				cu, err := duDir(filepath.Join(dir, e.Name()), w.maxEntries)
				if err != nil {
					d.errs = append(d.errs, err.Error())
					continue
				}
				d.containerLogs[e.Name()] = cu
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			d.errs = append(d.errs, err.Error())
		} else {
			d.podLogs = &diskUsage{} // a pod that has not logged yet uses nothing
		}
	} else {
		d.podLogs = &diskUsage{}
	}
	podDir := filepath.Join(w.kubeletRootDir, "pods", string(pod.runtimeUID()))
	for _, plugin := range localVolumePlugins {
		pluginDir := filepath.Join(podDir, "volumes", plugin)
		vols, err := os.ReadDir(pluginDir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				d.errs = append(d.errs, fmt.Sprintf("listing %s: %v", pluginDir, err))
			}
			continue
		}
		for _, v := range vols {
			volDir := filepath.Join(pluginDir, v.Name())
			u, err := duDir(volDir, w.maxEntries)
			if err != nil {
				d.errs = append(d.errs, err.Error())
				continue
			}
			d.volumes[v.Name()] = u
			var sfs unix.Statfs_t
			if unix.Statfs(volDir, &sfs) == nil && sfs.Type == tmpfsMagic {
				d.memoryBacked[v.Name()] = true
			}
		}
	}
	if st, err := os.Lstat(filepath.Join(podDir, "etc-hosts")); err == nil {
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			d.etcHosts = &diskUsage{bytes: s.Blocks * 512, inodes: 1}
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		d.etcHosts = &diskUsage{}
	}
	return d
}

// writableLayer is a container's writable layer as the runtime reports it.
type writableLayer struct {
	bytes  *int64
	inodes *int64
}

// podUIDLabel and the container metadata name are how the kubelet labels CRI
// containers (pkg/kubelet/types/labels.go).
const podUIDLabel = "io.kubernetes.pod.uid"

// readWritableLayers lists every running container's writable layer usage,
// by pod UID and container name, and names each container ID.
func readWritableLayers(ctx context.Context, rt RuntimeStats) (map[types.UID]map[string]writableLayer, map[string]containerName, error) {
	stats, err := rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
	if err != nil {
		return nil, nil, fmt.Errorf("CRI ListContainerStats: %w", err)
	}
	out := map[types.UID]map[string]writableLayer{}
	ids := make(map[string]containerName, len(stats))
	for _, s := range stats {
		uid := types.UID(s.GetAttributes().GetLabels()[podUIDLabel])
		name := s.GetAttributes().GetMetadata().GetName()
		if uid == "" || name == "" {
			continue
		}
		if id := s.GetAttributes().GetId(); id != "" {
			ids[id] = containerName{pod: uid, name: name}
		}
		var wl writableLayer
		if s.GetWritableLayer().GetUsedBytes() != nil {
			v := int64(s.GetWritableLayer().GetUsedBytes().GetValue())
			wl.bytes = &v
		}
		if s.GetWritableLayer().GetInodesUsed() != nil {
			v := int64(s.GetWritableLayer().GetInodesUsed().GetValue())
			wl.inodes = &v
		}
		if out[uid] == nil {
			out[uid] = map[string]writableLayer{}
		}
		out[uid][name] = wl
	}
	return out, ids, nil
}
