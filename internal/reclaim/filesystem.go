package reclaim

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	internalapi "k8s.io/cri-api/pkg/apis"

	"github.com/evictiond/evictiond/internal/policy"
)

// measuredFS is a filesystem measured by statfs, in bytes or inodes.
type measuredFS struct {
	path   string // as the agent sees it (HostRoot-prefixed)
	inodes bool
}

func (f measuredFS) unit() string {
	if f.inodes {
		return "inodes"
	}
	return "bytes"
}

// available is what the kubelet (through cAdvisor) calls available: blocks available to
// unprivileged users times the block size, or free inodes.
func (f measuredFS) available() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(f.path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", f.path, err)
	}
	if f.inodes {
		return int64(st.Ffree), nil
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// fsKind is which of the kubelet's filesystems a signal is about.
type fsKind int

const (
	fsNode fsKind = iota
	fsImage
	fsContainer
)

// filesystemFor picks the filesystem (and unit) measured for req: the signal's, or the step's
// own when no signal is given.
func (r *Reclaimer) filesystemFor(ctx context.Context, is internalapi.ImageManagerService, req Request) (measuredFS, error) {
	kind := map[policy.ReclaimStep]fsKind{
		policy.ReclaimContainerGC: fsContainer,
		policy.ReclaimImageGC:     fsImage,
		policy.ReclaimPodLogs:     fsNode,
	}[req.Step]
	inodes := false
	switch req.Signal {
	case "":
	case policy.SignalNodeFsAvailable:
		kind = fsNode
	case policy.SignalNodeFsInodesFree:
		kind, inodes = fsNode, true
	case policy.SignalImageFsAvailable:
		kind = fsImage
	case policy.SignalImageFsInodesFree:
		kind, inodes = fsImage, true
	case policy.SignalContainerFsAvailable:
		kind = fsContainer
	case policy.SignalContainerFsInodesFree:
		kind, inodes = fsContainer, true
	default:
		return measuredFS{}, fmt.Errorf("signal %q: not a disk signal (want nodefs.*, imagefs.* or containerfs.*)", req.Signal)
	}
	if kind == fsNode {
		return measuredFS{path: r.hostPath(r.opts.NodeFsPath), inodes: inodes}, nil
	}
	mounts, err := runtimeFilesystems(ctx, is)
	if err != nil {
		return measuredFS{}, err
	}
	path := mounts.imageFs
	if kind == fsContainer && mounts.containerFs != "" {
		path = mounts.containerFs
	}
	return measuredFS{path: r.hostPath(path), inodes: inodes}, nil
}

// runtimeMounts are the runtime's filesystems as host paths.
type runtimeMounts struct {
	imageFs     string
	containerFs string // empty when the runtime reports none (containerd 1.6): same as imageFs
}

func runtimeFilesystems(ctx context.Context, is internalapi.ImageManagerService) (runtimeMounts, error) {
	info, err := is.ImageFsInfo(ctx)
	if err != nil {
		return runtimeMounts{}, fmt.Errorf("CRI ImageFsInfo: %w", err)
	}
	var m runtimeMounts
	for _, fs := range info.GetImageFilesystems() {
		if mp := fs.GetFsId().GetMountpoint(); mp != "" {
			m.imageFs = mp
			break
		}
	}
	for _, fs := range info.GetContainerFilesystems() {
		if mp := fs.GetFsId().GetMountpoint(); mp != "" {
			m.containerFs = mp
			break
		}
	}
	if m.imageFs == "" {
		return runtimeMounts{}, fmt.Errorf("CRI ImageFsInfo: no image filesystem mountpoint reported")
	}
	return m, nil
}

// hostPath maps a host path to the path the agent sees.
func (r *Reclaimer) hostPath(p string) string {
	if r.opts.HostRoot == "" || r.opts.HostRoot == "/" {
		return p
	}
	return filepath.Join(r.opts.HostRoot, strings.TrimPrefix(p, "/"))
}

// DetectLayout reports how nodefs, imagefs and containerfs are split on this node, as the
// kubelet decides it (device IDs of the kubelet's root dir and of the runtime's filesystems).
// policy orders the reclaim steps of each disk signal by it.
func (r *Reclaimer) DetectLayout(ctx context.Context) (policy.FilesystemLayout, error) {
	_, is, err := r.connect()
	if err != nil {
		return policy.FilesystemLayout{}, err
	}
	mounts, err := runtimeFilesystems(ctx, is)
	if err != nil {
		return policy.FilesystemLayout{}, err
	}
	nodeDev, err := deviceOf(r.hostPath(r.opts.NodeFsPath))
	if err != nil {
		return policy.FilesystemLayout{}, err
	}
	imageDev, err := deviceOf(r.hostPath(mounts.imageFs))
	if err != nil {
		return policy.FilesystemLayout{}, err
	}
	layout := policy.FilesystemLayout{DedicatedImageFs: imageDev != nodeDev}
	if layout.DedicatedImageFs && mounts.containerFs != "" {
		containerDev, err := deviceOf(r.hostPath(mounts.containerFs))
		if err != nil {
			return policy.FilesystemLayout{}, err
		}
		layout.SplitContainerFs = containerDev != imageDev
	}
	return layout, nil
}

func deviceOf(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Dev, nil
}
