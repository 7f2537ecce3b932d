package main

import (
	"io"
	"strings"
	"testing"

	"github.com/evictiond/evictiond/internal/monitor"
)

func TestRunFlagsDetectTheNodeByDefault(t *testing.T) {
	f, err := parseRunFlags([]string{"--node-name", "n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.Node.CgroupDriver != "auto" || f.Node.CgroupRoot != "" || f.Node.KubeletConfig != monitor.DefaultKubeletConfigFile {
		t.Errorf("defaults: --cgroup-driver %q --cgroup-root %q --kubelet-config %q; want auto, \"\" (detected), %s",
			f.Node.CgroupDriver, f.Node.CgroupRoot, f.Node.KubeletConfig, monitor.DefaultKubeletConfigFile)
	}
	for _, d := range []string{"cgroupfs", "systemd", "auto"} {
		if _, err := parseRunFlags([]string{"--node-name", "n1", "--cgroup-driver", d}, io.Discard); err != nil {
			t.Errorf("--cgroup-driver %s: %v", d, err)
		}
	}
	_, err = parseRunFlags([]string{"--node-name", "n1", "--cgroup-driver", "docker"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--cgroup-driver "docker": must be auto, cgroupfs or systemd`) {
		t.Errorf("--cgroup-driver docker: %v", err)
	}
}
