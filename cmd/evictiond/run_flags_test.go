package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/evictiond/evictiond/internal/monitor"
)

func TestRunFlagsDetectTheNodeByDefault(t *testing.T) {
	f, _, ok := parseRunFlags([]string{"--node-name", "n1"}, io.Discard, io.Discard)
	if !ok {
		t.Fatal("--node-name n1 refused")
	}
	if f.Node.CgroupDriver != "auto" || f.Node.CgroupRoot != "" || f.Node.KubeletConfig != monitor.DefaultKubeletConfigFile {
		t.Errorf("defaults: --cgroup-driver %q --cgroup-root %q --kubelet-config %q; want auto, \"\" (detected), %s",
			f.Node.CgroupDriver, f.Node.CgroupRoot, f.Node.KubeletConfig, monitor.DefaultKubeletConfigFile)
	}
	for _, d := range []string{"cgroupfs", "systemd", "auto"} {
		if _, _, ok := parseRunFlags([]string{"--node-name", "n1", "--cgroup-driver", d}, io.Discard, io.Discard); !ok {
			t.Errorf("--cgroup-driver %s refused", d)
		}
	}
	var stderr bytes.Buffer
	_, code, ok := parseRunFlags([]string{"--node-name", "n1", "--cgroup-driver", "docker"}, io.Discard, &stderr)
	if ok || code != exitUsage || !strings.Contains(stderr.String(), `--cgroup-driver "docker": must be auto, cgroupfs or systemd`) {
		t.Errorf("--cgroup-driver docker: ok %v, exit %d, stderr %q", ok, code, stderr.String())
	}
}

func TestRunFlagsNodeNameAndPodUIDFromTheEnvironment(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	t.Setenv("POD_UID", "uid-from-env")
	f, _, ok := parseRunFlags(nil, io.Discard, io.Discard)
	if !ok || f.NodeName != "from-env" || f.SelfUID != "uid-from-env" {
		t.Fatalf("ok %v, flags %+v; want node-name and pod-uid from $NODE_NAME and $POD_UID", ok, f)
	}
	f, _, ok = parseRunFlags([]string{"--node-name=flag"}, io.Discard, io.Discard)
	if !ok || f.NodeName != "flag" {
		t.Fatalf("--node-name does not win over $NODE_NAME: %+v", f)
	}
}

// Scripts written for the Go flag package's single dash keep working.
func TestRunFlagsAcceptTheSingleDashLongForm(t *testing.T) {
	f, _, ok := parseRunFlags([]string{"-node-name=n1", "-cgroup-driver", "systemd", "-dry-run", "-v=4", "-log-format=text"}, io.Discard, io.Discard)
	if !ok || f.NodeName != "n1" || f.Node.CgroupDriver != "systemd" || !f.DryRun || f.log.verbosity != 4 || f.log.format != "text" {
		t.Fatalf("ok %v, flags %+v", ok, f)
	}
}

func TestRunFlagsDebugIsADeprecatedVerbosity(t *testing.T) {
	var stderr bytes.Buffer
	f, _, ok := parseRunFlags([]string{"--node-name=n1", "--debug"}, io.Discard, &stderr)
	if !ok || f.log.verbosity != 4 || !strings.Contains(stderr.String(), "--debug has been deprecated, use -v=4") {
		t.Fatalf("ok %v, verbosity %d, stderr %q", ok, f.log.verbosity, stderr.String())
	}
}

// The signal families of mixed units are off unless asked for (docs/metrics.md).
func TestRunFlagsLegacySignalMetricsOffByDefault(t *testing.T) {
	f, _, ok := parseRunFlags([]string{"--node-name=n1"}, io.Discard, io.Discard)
	if !ok || f.LegacySignalMetrics {
		t.Fatalf("ok %v, legacy signal metrics %v by default; want false", ok, f.LegacySignalMetrics)
	}
	f, _, ok = parseRunFlags([]string{"--node-name=n1", "--legacy-signal-metrics"}, io.Discard, io.Discard)
	if !ok || !f.LegacySignalMetrics {
		t.Fatalf("ok %v, --legacy-signal-metrics gives %v; want true", ok, f.LegacySignalMetrics)
	}
}
