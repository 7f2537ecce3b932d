package reclaim

import (
	"context"
	"fmt"

	"github.com/evictiond/evictiond/internal/nodefs"
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

// available is what the kubelet (through cAdvisor) calls available, measured as the
// monitor measures it (nodefs.Statfs): bytes an unprivileged writer can use, or free inodes.
func (f measuredFS) available() (int64, error) {
	u, err := nodefs.Statfs(f.path)
	if err != nil {
		return 0, err
	}
	if f.inodes {
		return u.InodesFree, nil
	}
	return u.Available, nil
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
func (r *Reclaimer) filesystemFor(ctx context.Context, is imageService, req Request) (measuredFS, error) {
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
	mounts, err := nodefs.ReadRuntimeFilesystems(ctx, is)
	if err != nil {
		return measuredFS{}, err
	}
	path := mounts.ImageMountpoint
	if kind == fsContainer {
		path = mounts.ContainerMountpoint
	}
	return measuredFS{path: r.hostPath(path), inodes: inodes}, nil
}

// hostPath maps a host path to the path the agent sees.
func (r *Reclaimer) hostPath(p string) string { return nodefs.HostPath(r.opts.HostRoot, p) }
