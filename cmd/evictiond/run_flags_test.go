package main

import (
	"io"
	"strings"
	"testing"

	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/policy"
)

func TestRunFlagsDetectTheNodeByDefault(t *testing.T) {
	f, err := parseRunFlags([]string{"--node-name", "n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.cgroupDriver != "auto" || f.cgroupRoot != "" || f.kubeletConfig != monitor.DefaultKubeletConfigFile {
		t.Errorf("defaults: --cgroup-driver %q --cgroup-root %q --kubelet-config %q; want auto, \"\" (detected), %s",
			f.cgroupDriver, f.cgroupRoot, f.kubeletConfig, monitor.DefaultKubeletConfigFile)
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

func TestRunUsesTheDetectedRuntimeOnlyWhenTheConfigurationNamesNone(t *testing.T) {
	f := &runFlags{runtime: monitor.RuntimeEndpoint{Endpoint: "unix:///host/run/crio/crio.sock", From: monitor.RuntimeFromSocket}}
	var unset, set policy.Config
	set.Reclaim.CRIEndpoint = "unix:///run/containerd/containerd.sock"
	applyFlagOverrides(&unset, f)
	applyFlagOverrides(&set, f)
	if unset.Reclaim.CRIEndpoint != "unix:///host/run/crio/crio.sock" {
		t.Errorf("unset reclaim.criEndpoint became %q, want the detected socket", unset.Reclaim.CRIEndpoint)
	}
	if set.Reclaim.CRIEndpoint != "unix:///run/containerd/containerd.sock" {
		t.Errorf("configured reclaim.criEndpoint became %q, want it kept", set.Reclaim.CRIEndpoint)
	}
}
