package nodefs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// Usage is a filesystem's size as statfs(2) reports it, the numbers cAdvisor
// gives the kubelet: capacity = blocks*frsize, available = bavail*frsize (what
// an unprivileged writer can still use), inodes = files, inodesFree = ffree.
//
// Frsize, not Bsize: f_blocks and f_bavail count fragments of f_frsize bytes
// (statvfs(3)); f_bsize is only the preferred I/O size. They are equal on ext4
// and xfs, but not everywhere (NFS reports its transfer size as f_bsize), and
// cAdvisor multiplies by Frsize, so this is the kubelet's number too.
type Usage struct {
	Device     uint64 // st_dev of the directory, to tell filesystems apart
	Capacity   int64
	Available  int64
	Inodes     int64
	InodesFree int64
}

// Statfs measures the filesystem holding dir.
func Statfs(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	var s unix.Stat_t
	if err := unix.Stat(dir, &s); err != nil {
		return Usage{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	frsize := st.Frsize
	if frsize == 0 { // kernels before 2.6 left it unset
		frsize = st.Bsize
	}
	return Usage{
		Device:     s.Dev,
		Capacity:   int64(st.Blocks) * frsize,
		Available:  int64(st.Bavail) * frsize,
		Inodes:     int64(st.Files),
		InodesFree: int64(st.Ffree),
	}, nil
}

// ImageFsInfoer is the CRI call that names the runtime's filesystems (both the
// CRI's ImageManagerService and the monitor's runtime client have it).
type ImageFsInfoer interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// RuntimeFilesystems is what the CRI says about where images and writable
// layers live, as host paths, with the runtime's own usage when it reports it.
type RuntimeFilesystems struct {
	ImageMountpoint string
	ImageUsed       *int64
	// ContainerMountpoint is ImageMountpoint when the runtime reports no
	// container filesystem (containerd 1.6 and 2.2): the kubelet then takes writable
	// layers to live with the images.
	ContainerMountpoint string
	ContainerUsed       *int64
}

// ReadRuntimeFilesystems asks the runtime for its filesystems; each is the
// first entry with a mountpoint (an entry without one names nothing).
func ReadRuntimeFilesystems(ctx context.Context, rt ImageFsInfoer) (RuntimeFilesystems, error) {
	resp, err := rt.ImageFsInfo(ctx)
	if err != nil {
		return RuntimeFilesystems{}, fmt.Errorf("CRI ImageFsInfo: %w", err)
	}
	image := firstMounted(resp.GetImageFilesystems())
	if image == nil {
		return RuntimeFilesystems{}, fmt.Errorf("CRI ImageFsInfo: no image filesystem with a mountpoint in the answer")
	}
	out := RuntimeFilesystems{ImageMountpoint: image.GetFsId().GetMountpoint(), ImageUsed: usedBytes(image)}
	if c := firstMounted(resp.GetContainerFilesystems()); c != nil {
		out.ContainerMountpoint, out.ContainerUsed = c.GetFsId().GetMountpoint(), usedBytes(c)
	} else {
		out.ContainerMountpoint, out.ContainerUsed = out.ImageMountpoint, out.ImageUsed
	}
	return out, nil
}

func firstMounted(fss []*runtimeapi.FilesystemUsage) *runtimeapi.FilesystemUsage {
	for _, fs := range fss {
		if fs.GetFsId().GetMountpoint() != "" {
			return fs
		}
	}
	return nil
}

func usedBytes(u *runtimeapi.FilesystemUsage) *int64 {
	if u.GetUsedBytes() == nil {
		return nil
	}
	v := int64(u.GetUsedBytes().GetValue())
	return &v
}

// HostPath is where the agent sees a host path p when the host's root is
// mounted at hostRoot ("" or "/": the host's own view).
func HostPath(hostRoot, p string) string {
	if hostRoot == "" || hostRoot == "/" {
		return p
	}
	return filepath.Join(hostRoot, strings.TrimPrefix(p, "/"))
}

// Layout is the kubelet's filesystem layout from the devices of nodefs (the
// kubelet's root dir), imagefs and containerfs: a dedicated imagefs when the
// images are not on nodefs, and a split containerfs only beside a dedicated
// imagefs (the kubelet rejects a split without one).
func Layout(node, image, container uint64) policy.FilesystemLayout {
	dedicated := image != node
	return policy.FilesystemLayout{DedicatedImageFs: dedicated, SplitContainerFs: dedicated && container != image}
}
