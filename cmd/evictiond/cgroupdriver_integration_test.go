//go:build integration

package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/reclaim"
	"github.com/evictiond/evictiond/internal/testenv/containerd"
)

// TestRunWarnsWhenTheRuntimesCgroupDriverIsNotTheFlags proves the start-up check against a real
// containerd 2 (cgroupfs): --cgroup-driver=systemd gets a warning naming both drivers (the
// kubelet would use the runtime's), --cgroup-driver=cgroupfs an info line and no warning.
func TestRunWarnsWhenTheRuntimesCgroupDriverIsNotTheFlags(t *testing.T) {
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 64 << 20})
	dir := t.TempDir()
	for _, tc := range []struct {
		flag, want string
		warn       bool
	}{
		{"systemd", `"runtimeCgroupDriver":"cgroupfs","cgroupDriver":"systemd"`, true},
		{"cgroupfs", `"msg":"runtime cgroup driver matches --cgroup-driver","cgroupDriver":"cgroupfs"`, false},
	} {
		logs := &syncBuffer{}
		log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		rc, err := reclaim.New(reclaim.Options{RuntimeEndpoint: ctrd.Endpoint, StateFile: filepath.Join(dir, tc.flag+".json"),
			NodeFsPath: dir, PodLogsDir: dir, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		checkRuntimeCgroupDriver(ctx, rc, tc.flag, log)
		cancel()
		_ = rc.Close()
		out := logs.String()
		if !strings.Contains(out, tc.want) {
			t.Errorf("--cgroup-driver=%s: log has no %s:\n%s", tc.flag, tc.want, out)
		}
		if got := strings.Contains(out, `"level":"WARN"`); got != tc.warn {
			t.Errorf("--cgroup-driver=%s: warning logged = %v, want %v:\n%s", tc.flag, got, tc.warn, out)
		}
	}
}
