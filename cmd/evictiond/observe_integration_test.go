//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/policy"
)

// TestObserveOnThisHostDiscoversPodCgroups runs observe with the embedded
// cAdvisor against this machine's cgroup v1 hierarchy, with a kubepods tree
// made for the test under a private cgroup root.
func TestObserveOnThisHostDiscoversPodCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test creates cgroups and must run as root")
	}
	root := fmt.Sprintf("/evictiond-test-observe-%d", os.Getpid())
	uid := "12345678-0000-4000-8000-0000000000ab"
	var made []string
	for _, ctl := range []string{"memory", "pids", "devices"} {
		for _, p := range []string{"", "/kubepods", "/kubepods/burstable", "/kubepods/burstable/pod" + uid} {
			dir := filepath.Join("/sys/fs/cgroup", ctl, root+p)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatalf("creating cgroup %s: %v (is the cgroup v1 %s controller mounted?)", dir, err, ctl)
			}
			made = append(made, dir)
		}
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			for try := 0; try < 50; try++ {
				if err := os.Remove(made[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})

	var stdout, stderr bytes.Buffer
	args := []string{"--once", "-o", "json", "--cgroup-root", root, "--kubelet-root-dir", t.TempDir(),
		"--pod-logs-dir", t.TempDir(), "--image-fs-dir", t.TempDir(), "--housekeeping-interval", "1s"}
	if code := runObserve(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var out observeOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout.String())
	}
	if len(out.Pods) != 1 || string(out.Pods[0].UID) != uid || out.Pods[0].QOSClass != "Burstable" {
		t.Fatalf("pods %+v, want the one test pod (Burstable)", out.Pods)
	}
	if out.Pods[0].Processes == nil || *out.Pods[0].Processes != 0 {
		t.Errorf("empty pod cgroup has %v processes", out.Pods[0].Processes)
	}
	sources := map[policy.Signal]monitor.Source{}
	for _, s := range out.Signals {
		sources[s.Signal] = s.Source
	}
	want := map[policy.Signal]monitor.Source{
		policy.SignalMemoryAvailable:    monitor.SourceCgroupWorkingSet,
		policy.SignalPIDAvailable:       monitor.SourceProcPIDs,
		policy.SignalNodeFsAvailable:    monitor.SourceStatfs,
		policy.SignalImageFsAvailable:   monitor.SourceCAdvisor,
		policy.SignalMemoryPSISomeAvg10: monitor.SourceProcPSI,
	}
	for sig, src := range want {
		if sources[sig] != src {
			t.Errorf("%s source %q, want %q (missing: %s)", sig, sources[sig], src, out.Missing[sig])
		}
	}
	if out.Missing[policy.SignalAllocatableMemoryAvailable] == "" {
		t.Error("a kubepods cgroup without a limit gave an allocatableMemory.available observation")
	}
}
