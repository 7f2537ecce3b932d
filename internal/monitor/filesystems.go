package monitor

import (
	"context"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fsUsage is a filesystem's size as statfs(2) reports it, the numbers cAdvisor
// gives the kubelet: capacity = blocks*frsize, available = bavail*frsize (what
// an unprivileged writer can still use), inodes = files, inodesFree = ffree.
type fsUsage struct {
	device     uint64 // st_dev of the directory, to tell filesystems apart
	capacity   int64
	available  int64
	inodes     int64
	inodesFree int64
}

func statFilesystem(dir string) (fsUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fsUsage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	var s unix.Stat_t
	if err := unix.Stat(dir, &s); err != nil {
		return fsUsage{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	bsize := int64(st.Frsize)
	if bsize == 0 {
		bsize = int64(st.Bsize)
	}
	return fsUsage{
		device:     s.Dev,
		capacity:   int64(st.Blocks) * bsize,
		available:  int64(st.Bavail) * bsize,
		inodes:     int64(st.Files),
		inodesFree: int64(st.Ffree),
	}, nil
}

// runtimeFilesystems is what the CRI says about where images and writable
// layers live.
type runtimeFilesystems struct {
	imageMountpoint     string
	imageUsed           *int64
	containerMountpoint string
	containerUsed       *int64
}

// readRuntimeFilesystems asks the CRI for its image and container
// filesystems. A runtime that reports no container_filesystems keeps writable
// layers with its images (the kubelet treats containerfs as imagefs then).
func readRuntimeFilesystems(ctx context.Context, rt RuntimeStats) (runtimeFilesystems, error) {
	resp, err := rt.ImageFsInfo(ctx)
	if err != nil {
		return runtimeFilesystems{}, fmt.Errorf("CRI ImageFsInfo: %w", err)
	}
	images := resp.GetImageFilesystems()
	if len(images) == 0 || images[0].GetFsId().GetMountpoint() == "" {
		return runtimeFilesystems{}, fmt.Errorf("CRI ImageFsInfo: no image filesystem with a mountpoint in the answer")
	}
	out := runtimeFilesystems{
		imageMountpoint: images[0].GetFsId().GetMountpoint(),
		imageUsed:       usedBytes(images[0]),
	}
	if containers := resp.GetContainerFilesystems(); len(containers) > 0 && containers[0].GetFsId().GetMountpoint() != "" {
		out.containerMountpoint = containers[0].GetFsId().GetMountpoint()
		out.containerUsed = usedBytes(containers[0])
	} else {
		out.containerMountpoint = out.imageMountpoint
		out.containerUsed = out.imageUsed
	}
	return out, nil
}

func usedBytes(u *runtimeapi.FilesystemUsage) *int64 {
	if u.GetUsedBytes() == nil {
		return nil
	}
	v := int64(u.GetUsedBytes().GetValue())
	return &v
}

// hostPath joins the host root with a path as the host sees it.
func hostPath(hostRoot, p string) string {
	if hostRoot == "" || hostRoot == "/" {
		return p
	}
	return filepath.Join(hostRoot, p)
}
