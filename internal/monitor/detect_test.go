package monitor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// Node trees for detection are written by the tests: every combination of
// cgroup version and driver, with or without kubepods, with static pods. The
// cgroup names are spelled out here as the kubelet writes them (its
// ToCgroupfs/ToSystemd: systemd turns [kubepods burstable pod<uid>] into
// kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, - as _>.slice),
// not computed by the code under test.

const (
	// A static pod's UID: the kubelet's fnv128a hash of the manifest, 32 hex digits.
	staticUID = types.UID("6f1b2c3d4e5f60718293a4b5c6d7e8f9")
	// Its mirror pod's UID in the API server.
	mirrorUID = types.UID("aa11bb22-cc33-4d44-8e55-ff6677889900")
	// A static pod from a manifest that sets metadata.uid itself.
	manifestUID = types.UID("etcd-node-1")
	apiUID      = types.UID("0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111")
)

type treePod struct {
	uid types.UID
	qos v1.PodQOSClass
}

// node is a host root under construction.
type node struct {
	t    *testing.T
	root string
}

func newNode(t *testing.T, version CgroupVersion) *node {
	t.Helper()
	n := &node{t: t, root: t.TempDir()}
	n.write("proc/meminfo", "MemTotal: 16384000 kB\nMemAvailable: 9000000 kB\n")
	if version == CgroupV2 {
		n.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
		n.write("sys/fs/cgroup/memory.stat", "anon 1073741824\nfile 1073741824\ninactive_file 536870912\n")
	} else {
		n.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "2147483648\n")
		n.write("sys/fs/cgroup/memory/memory.stat", "total_inactive_file 536870912\n")
		n.mkdir("sys/fs/cgroup/pids")
	}
	return n
}

func (n *node) write(rel, data string) {
	n.t.Helper()
	p := filepath.Join(n.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) mkdir(rel string) {
	n.t.Helper()
	if err := os.MkdirAll(filepath.Join(n.root, rel), 0o755); err != nil {
		n.t.Fatal(err)
	}
}

// memcg writes a memory cgroup with the given usage (inactive_file 1 MiB).
func (n *node) memcg(version CgroupVersion, cgroup string, usage int64) {
	if version == CgroupV2 {
		dir := "sys/fs/cgroup/" + cgroup
		n.write(dir+"/memory.current", fmt.Sprintf("%d\n", usage))
		n.write(dir+"/memory.max", "12884901888\n")
		n.write(dir+"/memory.stat", "inactive_file 1048576\n")
		n.write(dir+"/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
		n.write(dir+"/cgroup.procs", "")
		n.write(dir+"/pids.current", "0\n")
		return
	}
	dir := "sys/fs/cgroup/memory/" + cgroup
	n.write(dir+"/memory.usage_in_bytes", fmt.Sprintf("%d\n", usage))
	n.write(dir+"/memory.limit_in_bytes", "12884901888\n")
	n.write(dir+"/memory.stat", "total_inactive_file 1048576\n")
	n.write(dir+"/cgroup.procs", "")
	n.write("sys/fs/cgroup/pids/"+cgroup+"/cgroup.procs", "")
	n.write("sys/fs/cgroup/pids/"+cgroup+"/pids.current", "0\n")
}

// kubepods writes the kubelet's kubepods cgroup, its tiers and pods, named as
// the kubelet names them, and returns each pod's cgroup path.
func (n *node) kubepods(version CgroupVersion, driver CgroupDriver, pods ...treePod) map[types.UID]string {
	paths := map[types.UID]string{}
	if driver == CgroupDriverSystemd {
		n.memcg(version, "kubepods.slice", 1<<30)
		tier := map[v1.PodQOSClass]string{
			v1.PodQOSGuaranteed: "kubepods.slice/kubepods",
			v1.PodQOSBurstable:  "kubepods.slice/kubepods-burstable.slice/kubepods-burstable",
			v1.PodQOSBestEffort: "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort",
		}
		n.memcg(version, "kubepods.slice/kubepods-burstable.slice", 0)
		n.memcg(version, "kubepods.slice/kubepods-besteffort.slice", 0)
		for i, p := range pods {
			cg := tier[p.qos] + "-pod" + strings.ReplaceAll(string(p.uid), "-", "_") + ".slice"
			n.memcg(version, cg, int64(i+1)<<20+1<<20)
			paths[p.uid] = "/" + cg
		}
		return paths
	}
	n.memcg(version, "kubepods", 1<<30)
	n.memcg(version, "kubepods/burstable", 0)
	n.memcg(version, "kubepods/besteffort", 0)
	tier := map[v1.PodQOSClass]string{v1.PodQOSGuaranteed: "kubepods/", v1.PodQOSBurstable: "kubepods/burstable/", v1.PodQOSBestEffort: "kubepods/besteffort/"}
	for i, p := range pods {
		cg := tier[p.qos] + "pod" + string(p.uid)
		n.memcg(version, cg, int64(i+1)<<20+1<<20)
		paths[p.uid] = "/" + cg
	}
	return paths
}

func (n *node) kubeletConfig(body string) string {
	n.write("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body)
	return DefaultKubeletConfigFile
}

func (n *node) monitor(mutate func(*Config)) (*Monitor, error) {
	cfg := Config{HostRoot: n.root, DisableCAdvisor: true, Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	if mutate != nil {
		mutate(&cfg)
	}
	return New(cfg)
}

func TestStaticPodCgroupsAreFoundInEveryLayout(t *testing.T) {
	pods := []treePod{
		{staticUID, v1.PodQOSBurstable},
		{apiUID, v1.PodQOSGuaranteed},
		{manifestUID, v1.PodQOSBestEffort},
		{"00112233445566778899aabbccddeeff", v1.PodQOSGuaranteed},
	}
	for _, tc := range []struct {
		version CgroupVersion
		driver  CgroupDriver
		decoys  []string // directories under kubepods that are not pods
	}{
		{CgroupV2, CgroupDriverSystemd, []string{"kubepods.slice/kubepods-pod.slice", "kubepods.slice/other-pod0123.slice", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123.scope", "kubepods.slice/kubepods-burstable.slice/kubepods-pod0123.slice"}},
		{CgroupV2, CgroupDriverCgroupfs, []string{"kubepods/pod", "kubepods/burstable/notapod", "kubepods/besteffort/pod.x"}},
		{CgroupV1, CgroupDriverSystemd, []string{"memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod.slice", "memory/kubepods.slice/kubepods-pod0123.mount"}},
		{CgroupV1, CgroupDriverCgroupfs, []string{"memory/kubepods/pod", "memory/kubepods/burstable/podx.y"}},
	} {
		t.Run(fmt.Sprintf("v%d-%s", tc.version, tc.driver), func(t *testing.T) {
			n := newNode(t, tc.version)
			paths := n.kubepods(tc.version, tc.driver, pods...)
			for _, d := range tc.decoys {
				n.mkdir("sys/fs/cgroup/" + d)
			}
			m, err := n.monitor(nil) // auto: found from the tree
			if err != nil {
				t.Fatal(err)
			}
			if i := m.CgroupInfo(); i.Driver != tc.driver || i.Version != tc.version || i.DriverFrom != FromCgroupTree || !i.KubepodsFound {
				t.Fatalf("detected %+v, want v%d %s from the cgroup tree", i, tc.version, tc.driver)
			}
			found, err := m.DiscoverPods()
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, p := range found {
				got = append(got, string(p.UID)+" "+p.QOSClass)
			}
			for _, p := range pods {
				want = append(want, string(p.uid)+" "+string(p.qos))
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("discovered %v, want exactly %v", got, want)
			}
			// The API server names the static pod by its mirror's UID; the
			// cgroup goes by the kubelet's UID (the mirror annotation).
			ref := PodRef{UID: mirrorUID, RuntimeUID: staticUID, Namespace: "kube-system", Name: "etcd-node-1"}
			s := m.Observe(context.Background(), []PodRef{ref})
			if got := s.PodCgroups[mirrorUID].Path; got != paths[staticUID] {
				t.Errorf("static pod's cgroup %q, want %q (error: %s)", got, paths[staticUID], s.PodErrors[mirrorUID])
			}
			if ws := s.Pods[mirrorUID].MemoryWorkingSet; ws == nil || *ws != 2<<20-1<<20 {
				t.Errorf("static pod's working set %v, want %d", ws, 2<<20-1<<20)
			}
		})
	}
}

type hintRuntime struct {
	fakeRuntime
	driver runtimeapi.CgroupDriver
	err    error
}

func (h *hintRuntime) RuntimeConfig(context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	if h.err != nil {
		return nil, h.err
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: h.driver}}, nil
}

func TestDetectLayout(t *testing.T) {
	systemdCRI := &hintRuntime{driver: runtimeapi.CgroupDriver_SYSTEMD}
	cgroupfsCRI := &hintRuntime{driver: runtimeapi.CgroupDriver_CGROUPFS}
	for _, tc := range []struct {
		name    string
		version CgroupVersion
		tree    []CgroupDriver // kubepods the kubelet created (none: not up yet)
		kubelet string         // kubelet configuration body, "" for no file
		systemd bool           // /run/systemd/system exists
		cfg     func(*Config)
		want    CgroupInfo // Version, Driver, DriverFrom, Kubepods, KubepodsFound compared
		wantErr string
	}{
		{name: "v2 systemd tree", version: CgroupV2, tree: []CgroupDriver{CgroupDriverSystemd},
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromCgroupTree, Kubepods: "/kubepods.slice", KubepodsFound: true}},
		{name: "v2 cgroupfs tree", version: CgroupV2, tree: []CgroupDriver{CgroupDriverCgroupfs},
			want: CgroupInfo{Version: 2, Driver: CgroupDriverCgroupfs, DriverFrom: FromCgroupTree, Kubepods: "/kubepods", KubepodsFound: true}},
		{name: "v1 systemd tree", version: CgroupV1, tree: []CgroupDriver{CgroupDriverSystemd},
			want: CgroupInfo{Version: 1, Driver: CgroupDriverSystemd, DriverFrom: FromCgroupTree, Kubepods: "/kubepods.slice", KubepodsFound: true}},
		{name: "v1 cgroupfs tree", version: CgroupV1, tree: []CgroupDriver{CgroupDriverCgroupfs},
			want: CgroupInfo{Version: 1, Driver: CgroupDriverCgroupfs, DriverFrom: FromCgroupTree, Kubepods: "/kubepods", KubepodsFound: true}},
		{name: "tree wins over a contradicting kubelet config", version: CgroupV2, tree: []CgroupDriver{CgroupDriverSystemd}, kubelet: "cgroupDriver: cgroupfs\n",
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromCgroupTree, Kubepods: "/kubepods.slice", KubepodsFound: true}},
		{name: "no kubepods yet: kubelet config", version: CgroupV2, kubelet: "cgroupDriver: systemd\n",
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromKubeletConfig, Kubepods: "/kubepods.slice"}},
		{name: "no kubepods yet: kubelet config without cgroupDriver says nothing", version: CgroupV2, kubelet: "cgroupRoot: /\n",
			want: CgroupInfo{Version: 2, Driver: CgroupDriverCgroupfs, DriverFrom: FromDefault, Kubepods: "/kubepods"}},
		{name: "no kubepods yet: the runtime wins over the kubelet config, as in kubelet 1.34+", version: CgroupV1, kubelet: "cgroupDriver: systemd\n",
			cfg:  func(c *Config) { c.Runtime = cgroupfsCRI },
			want: CgroupInfo{Version: 1, Driver: CgroupDriverCgroupfs, DriverFrom: FromCRI, Kubepods: "/kubepods"}},
		{name: "no kubepods yet: runtime without RuntimeConfig falls back to the kubelet config", version: CgroupV2, kubelet: "cgroupDriver: systemd\n",
			cfg:  func(c *Config) { c.Runtime = &hintRuntime{err: errors.New("unimplemented")} },
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromKubeletConfig, Kubepods: "/kubepods.slice"}},
		{name: "no kubepods, no hints, systemd init", version: CgroupV2, systemd: true,
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromSystemdRunning, Kubepods: "/kubepods.slice"}},
		{name: "no kubepods, no hints, no systemd", version: CgroupV2,
			want: CgroupInfo{Version: 2, Driver: CgroupDriverCgroupfs, DriverFrom: FromDefault, Kubepods: "/kubepods"}},
		{name: "kubelet config's cgroupRoot", version: CgroupV2, kubelet: "cgroupRoot: /custom.slice\ncgroupDriver: systemd\n",
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromKubeletConfig, Kubepods: "/custom.slice/custom-kubepods.slice"}},
		{name: "both trees: the runtime decides", version: CgroupV2, tree: []CgroupDriver{CgroupDriverSystemd, CgroupDriverCgroupfs},
			cfg:  func(c *Config) { c.Runtime = systemdCRI },
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromCRI, Kubepods: "/kubepods.slice", KubepodsFound: true}},
		{name: "both trees and no hint", version: CgroupV2, tree: []CgroupDriver{CgroupDriverSystemd, CgroupDriverCgroupfs},
			wantErr: "--cgroup-driver auto: both /kubepods and /kubepods.slice exist"},
		{name: "explicit driver that the tree confirms", version: CgroupV2, tree: []CgroupDriver{CgroupDriverSystemd},
			cfg:  func(c *Config) { c.CgroupDriver = CgroupDriverSystemd },
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromFlag, Kubepods: "/kubepods.slice", KubepodsFound: true}},
		{name: "explicit cgroupfs on a systemd node", version: CgroupV2, tree: []CgroupDriver{CgroupDriverSystemd},
			cfg:     func(c *Config) { c.CgroupDriver = CgroupDriverCgroupfs },
			wantErr: "--cgroup-driver cgroupfs: this node's kubepods cgroup is /kubepods.slice (the systemd driver's)"},
		{name: "explicit systemd on a v1 cgroupfs node", version: CgroupV1, tree: []CgroupDriver{CgroupDriverCgroupfs},
			cfg:     func(c *Config) { c.CgroupDriver = CgroupDriverSystemd },
			wantErr: "--cgroup-driver systemd: this node's kubepods cgroup is /kubepods (the cgroupfs driver's)"},
		{name: "explicit driver the kubelet config contradicts before kubepods exists", version: CgroupV2, kubelet: "cgroupDriver: systemd\n",
			cfg:     func(c *Config) { c.CgroupDriver = CgroupDriverCgroupfs },
			wantErr: "--cgroup-driver cgroupfs: cgroupDriver in /var/lib/kubelet/config.yaml says systemd"},
		{name: "explicit driver the runtime contradicts before kubepods exists", version: CgroupV2,
			cfg:     func(c *Config) { c.CgroupDriver = CgroupDriverSystemd; c.Runtime = cgroupfsCRI },
			wantErr: "--cgroup-driver systemd: the runtime's RuntimeConfig says cgroupfs"},
		{name: "explicit driver and nothing to check it against", version: CgroupV2,
			cfg:  func(c *Config) { c.CgroupDriver = CgroupDriverSystemd },
			want: CgroupInfo{Version: 2, Driver: CgroupDriverSystemd, DriverFrom: FromFlag, Kubepods: "/kubepods.slice"}},
		{name: "explicit version the mount contradicts", version: CgroupV1, tree: []CgroupDriver{CgroupDriverCgroupfs},
			cfg:     func(c *Config) { c.CgroupVersion = CgroupV2 },
			wantErr: "--cgroup-version 2: the cgroup mount"},
		{name: "unknown driver", version: CgroupV2,
			cfg:     func(c *Config) { c.CgroupDriver = "systemD" },
			wantErr: `--cgroup-driver "systemD": must be auto, cgroupfs or systemd`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.version)
			for _, d := range tc.tree {
				n.kubepods(tc.version, d)
			}
			if tc.systemd {
				n.mkdir("run/systemd/system")
			}
			m, err := n.monitor(func(c *Config) {
				if tc.kubelet != "" {
					c.KubeletConfigFile = n.kubeletConfig(tc.kubelet)
				}
				if tc.cfg != nil {
					tc.cfg(c)
				}
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := m.CgroupInfo()
			got.VersionFrom, got.CgroupRoot = "", ""
			if got != tc.want {
				t.Errorf("detected %+v\nwant     %+v", got, tc.want)
			}
		})
	}
}

func TestUnreadableKubeletConfigIsIgnoredWithAWarning(t *testing.T) {
	n := newNode(t, CgroupV2)
	n.write("var/lib/kubelet/config.yaml", "apiVersion: v1\nkind: ConfigMap\n")
	var logs bytes.Buffer
	m, err := n.monitor(func(c *Config) {
		c.KubeletConfigFile = DefaultKubeletConfigFile
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	if i := m.CgroupInfo(); i.DriverFrom != FromDefault {
		t.Errorf("driver from %s, want %s (the file is no KubeletConfiguration)", i.DriverFrom, FromDefault)
	}
	if !strings.Contains(logs.String(), `kind \"ConfigMap\": must be KubeletConfiguration`) {
		t.Errorf("no warning naming the wrong kind in:\n%s", logs.String())
	}
}

func TestKubeletConfigAsJSON(t *testing.T) {
	n := newNode(t, CgroupV2)
	n.write("etc/kubernetes/kubelet/config.json", `{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1","cgroupDriver":"systemd"}`)
	m, err := n.monitor(func(c *Config) { c.KubeletConfigFile = "/etc/kubernetes/kubelet/config.json" })
	if err != nil {
		t.Fatal(err)
	}
	if i := m.CgroupInfo(); i.Driver != CgroupDriverSystemd || i.DriverFrom != FromKubeletConfig {
		t.Errorf("detected %+v, want systemd from the kubelet config", i)
	}
}

func nodeInfoValue(t *testing.T, m *Monitor, labels ...string) float64 {
	t.Helper()
	return testutil.ToFloat64(m.metrics.nodeInfo.WithLabelValues(labels...))
}

func TestProvisionalLayoutSettlesWhenKubepodsAppears(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  CgroupVersion
		systemd  bool
		appears  CgroupDriver
		wantWas  string
		wantNow  string
		switched bool
	}{
		{"v2 guessed systemd, kubelet makes kubepods.slice", CgroupV2, true, CgroupDriverSystemd, "/kubepods.slice", "/kubepods.slice", false},
		{"v2 guessed systemd, kubelet makes kubepods", CgroupV2, true, CgroupDriverCgroupfs, "/kubepods.slice", "/kubepods", true},
		{"v1 guessed cgroupfs, kubelet makes kubepods.slice", CgroupV1, false, CgroupDriverSystemd, "/kubepods", "/kubepods.slice", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.version)
			if tc.systemd {
				n.mkdir("run/systemd/system")
			}
			var logs bytes.Buffer
			m, err := n.monitor(func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				c.RuntimeEndpoint = RuntimeEndpoint{Endpoint: "unix:///run/containerd/containerd.sock", Runtime: "containerd", From: RuntimeFromSocket}
			})
			if err != nil {
				t.Fatal(err)
			}
			was := m.CgroupInfo()
			if was.KubepodsFound || was.Kubepods != tc.wantWas {
				t.Fatalf("before the kubelet: %+v, want provisional %s", was, tc.wantWas)
			}
			if !strings.Contains(logs.String(), "no kubepods cgroup yet") {
				t.Errorf("no warning that the layout is provisional:\n%s", logs.String())
			}
			v := fmt.Sprint(int(tc.version))
			if got := nodeInfoValue(t, m, v, string(was.Driver), was.DriverFrom, was.Kubepods, "false", "containerd", RuntimeFromSocket); got != 1 {
				t.Errorf("node_info for the provisional layout = %v, want 1", got)
			}
			// Before kubepods: the kubepods signals are missing, not failed reads, and no pods.
			s := m.ObserveNode(context.Background())
			sig := policy.SignalAllocatableMemoryAvailable
			if !strings.Contains(s.Missing[sig], "no kubepods cgroup yet") {
				t.Errorf("%s missing because %q, want the pending reason", sig, s.Missing[sig])
			}
			if n := counterValue(t, m.metrics.signalReadErrors, string(sig)); n != 0 {
				t.Errorf("%v read errors counted for a kubepods the kubelet has not created", n)
			}
			if _, err := m.DiscoverPods(); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("DiscoverPods before kubepods: %v, want not-exist", err)
			}

			n.kubepods(tc.version, tc.appears, treePod{staticUID, v1.PodQOSBurstable})
			s = m.ObserveNode(context.Background())
			now := m.CgroupInfo()
			if !now.KubepodsFound || now.Kubepods != tc.wantNow || now.Driver != tc.appears || now.DriverFrom != FromCgroupTree {
				t.Fatalf("after the kubelet: %+v, want %s found in the tree", now, tc.wantNow)
			}
			if _, ok := s.Observations[sig]; !ok {
				t.Errorf("%s still missing after kubepods appeared: %s", sig, s.Missing[sig])
			}
			pods, err := m.DiscoverPods()
			if err != nil || len(pods) != 1 || pods[0].UID != staticUID {
				t.Errorf("DiscoverPods after kubepods: %+v, %v; want the static pod", pods, err)
			}
			if got := nodeInfoValue(t, m, v, string(now.Driver), FromCgroupTree, now.Kubepods, "true", "containerd", RuntimeFromSocket); got != 1 {
				t.Errorf("node_info for the settled layout = %v, want 1", got)
			}
			if n := testutil.CollectAndCount(m.metrics.nodeInfo); n != 1 {
				t.Errorf("node_info has %d series, want 1", n)
			}
			if got := strings.Contains(logs.String(), "switching"); got != tc.switched {
				t.Errorf("logged a switch: %t, want %t:\n%s", got, tc.switched, logs.String())
			}
			if !strings.Contains(logs.String(), "kubepods cgroup found") {
				t.Errorf("no log line for the settled layout:\n%s", logs.String())
			}
		})
	}
}

func TestExplicitDriverContradictedLaterIsLoggedAndKept(t *testing.T) {
	n := newNode(t, CgroupV2)
	var logs bytes.Buffer
	m, err := n.monitor(func(c *Config) {
		c.CgroupDriver = CgroupDriverCgroupfs
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	n.kubepods(CgroupV2, CgroupDriverSystemd)
	m.ObserveNode(context.Background())
	m.ObserveNode(context.Background())
	if i := m.CgroupInfo(); i.Driver != CgroupDriverCgroupfs || i.KubepodsFound {
		t.Errorf("layout %+v, want the explicit cgroupfs, still unconfirmed", i)
	}
	if c := strings.Count(logs.String(), "--cgroup-driver cgroupfs: this node's kubepods cgroup is /kubepods.slice"); c != 1 {
		t.Errorf("the contradiction was logged %d times, want once:\n%s", c, logs.String())
	}
}

func TestDetectRuntimeEndpoint(t *testing.T) {
	// This machine's own sockets are not the test's.
	defer func(old string) { processRoot = old }(processRoot)
	processRoot = t.TempDir()
	listen := func(t *testing.T, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	t.Run("configured is used as is", func(t *testing.T) {
		got, err := DetectRuntimeEndpoint("unix:///var/run/crio/crio.sock", t.TempDir(), DefaultKubeletConfigFile)
		want := RuntimeEndpoint{Endpoint: "unix:///var/run/crio/crio.sock", HostPath: "/var/run/crio/crio.sock", Runtime: "crio", From: RuntimeFromConfiguration}
		if err != nil || got != want {
			t.Errorf("got %+v, %v; want %+v", got, err, want)
		}
	})
	// A unix socket's path has at most 107 bytes: short roots.
	shortRoot := func(t *testing.T) string {
		dir, err := os.MkdirTemp("", "rt")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	t.Run("CRI-O's socket under the host root", func(t *testing.T) {
		root := shortRoot(t)
		listen(t, filepath.Join(root, "run/crio/crio.sock"))
		got, err := DetectRuntimeEndpoint("", root, DefaultKubeletConfigFile)
		want := RuntimeEndpoint{Endpoint: "unix://" + filepath.Join(root, "run/crio/crio.sock"), HostPath: "/run/crio/crio.sock", Runtime: "crio", From: RuntimeFromSocket}
		if err != nil || got != want {
			t.Errorf("got %+v, %v; want %+v", got, err, want)
		}
	})
	t.Run("the kubelet config's containerRuntimeEndpoint first", func(t *testing.T) {
		root := shortRoot(t)
		listen(t, filepath.Join(root, "run/containerd/containerd.sock"))
		listen(t, filepath.Join(root, "run/k3s/containerd/containerd.sock"))
		n := &node{t: t, root: root}
		n.kubeletConfig("containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n")
		got, err := DetectRuntimeEndpoint("", root, DefaultKubeletConfigFile)
		want := RuntimeEndpoint{Endpoint: "unix://" + filepath.Join(root, "run/k3s/containerd/containerd.sock"), HostPath: "/run/k3s/containerd/containerd.sock", Runtime: "containerd", From: RuntimeFromKubeletConfig}
		if err != nil || got != want {
			t.Errorf("got %+v, %v; want %+v", got, err, want)
		}
	})
	t.Run("a regular file is no socket", func(t *testing.T) {
		root := t.TempDir()
		n := &node{t: t, root: root}
		n.write("run/containerd/containerd.sock", "")
		got, err := DetectRuntimeEndpoint("", root, "")
		want := RuntimeEndpoint{Endpoint: "unix:///run/containerd/containerd.sock", HostPath: "/run/containerd/containerd.sock", Runtime: "containerd", From: RuntimeFromDefault}
		if err != nil || got != want {
			t.Errorf("got %+v, %v; want %+v", got, err, want)
		}
	})
}

func TestAKubeletConfigTheTreeContradictsIsLogged(t *testing.T) {
	n := newNode(t, CgroupV2)
	n.kubepods(CgroupV2, CgroupDriverSystemd)
	var logs bytes.Buffer
	m, err := n.monitor(func(c *Config) {
		c.KubeletConfigFile = n.kubeletConfig("cgroupDriver: cgroupfs\n")
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	if i := m.CgroupInfo(); i.Driver != CgroupDriverSystemd || i.DriverFrom != FromCgroupTree {
		t.Errorf("detected %+v, want systemd from the tree", i)
	}
	want := "cgroupDriver in /var/lib/kubelet/config.yaml says cgroupfs, but systemd (cgroupTree) is used"
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
}
