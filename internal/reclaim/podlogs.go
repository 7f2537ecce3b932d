package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// podUIDFromLogDir parses the kubelet's pod log directory name, <namespace>_<name>_<uid>.
// Namespaces and pod names cannot contain '_', so the last field is the UID.
func podUIDFromLogDir(name string) (types.UID, bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", false
	}
	return types.UID(parts[2]), true
}

// cleanPodLogs removes the log directories of pods no longer on the node (the kubelet's
// evictPodLogsDirectories), then dangling links in the container log directory. A directory is
// kept when its pod is live, has a ready sandbox or a running container, or when it was
// modified within PodLogsMinAge. With an unknown live set nothing is removed but dangling links.
func (r *Reclaimer) cleanPodLogs(ctx context.Context, rt runtimeService, req Request, res *Result) error {
	if req.LivePods == nil {
		r.log.Warn("pod log cleanup: live pod set unknown, keeping every pod log directory")
		res.Errors = append(res.Errors, ErrLivePodsUnknown)
	} else {
		pods, err := listRuntimePods(ctx, rt)
		if err != nil {
			return err
		}
		if err := r.removeDeadPodLogDirs(ctx, pods, req.LivePods, res); err != nil {
			return err
		}
	}
	r.removeDanglingContainerLogLinks(res)
	return nil
}

func (r *Reclaimer) removeDeadPodLogDirs(ctx context.Context, pods *runtimePods, live LivePods, res *Result) error {
	dir := r.hostPath(r.opts.PodLogsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod log directory %s: %w", dir, err)
	}
	now := r.opts.Clock.Now()
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.IsDir() {
			continue
		}
		uid, ok := podUIDFromLogDir(e.Name())
		if !ok || live.Has(uid) || pods.readyUIDs[uid] || pods.runningUIDs[uid] {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if age := now.Sub(info.ModTime()); age < r.opts.PodLogsMinAge {
			r.log.Debug("pod log cleanup: directory too recent, keeping it", "path", path, "age", age)
			continue
		}
		if r.dryRun.Load() {
			r.log.Info("pod log cleanup: would remove pod log directory", "path", path, "podUID", uid)
			res.WouldRemove++
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			r.log.Warn("pod log cleanup: removing directory failed", "path", path, "err", err)
			res.Errors = append(res.Errors, fmt.Errorf("removing pod log directory %s: %w", path, err))
			continue
		}
		res.ItemsRemoved++
		r.log.Info("pod log cleanup: removed pod log directory", "path", path, "podUID", uid)
	}
	return nil
}

// removeDanglingContainerLogLinks removes links in the container log directory whose target
// no longer exists (the kubelet does the same in its container GC). Link targets are host
// paths, resolved under HostRoot.
func (r *Reclaimer) removeDanglingContainerLogLinks(res *Result) {
	dir := r.hostPath(r.opts.ContainerLogsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		link := filepath.Join(dir, e.Name())
		target, err := os.Readlink(link)
		if err != nil {
			continue
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(r.opts.ContainerLogsDir, target)
		}
		if _, err := os.Lstat(r.hostPath(target)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if r.dryRun.Load() {
			r.log.Info("pod log cleanup: would remove dangling container log link", "path", link, "target", target)
			res.WouldRemove++
			continue
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			res.Errors = append(res.Errors, fmt.Errorf("removing dangling container log link %s: %w", link, err))
			continue
		}
		res.ItemsRemoved++
	}
}
