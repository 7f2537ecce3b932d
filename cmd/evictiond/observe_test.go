package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/evictiond/evictiond/internal/policy"
)

const fixtureHost = "../../internal/monitor/testdata/v2-systemd"

func TestObserveOnceJSONFromAFixtureHost(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runObserve([]string{"--once", "-o", "json", "--no-cadvisor", "--host-root", fixtureHost, "--cgroup-driver", "systemd"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var out observeOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout.String())
	}
	signals := map[policy.Signal]signalOutput{}
	for _, s := range out.Signals {
		signals[s.Signal] = s
	}
	mem, ok := signals[policy.SignalMemoryAvailable]
	if !ok {
		t.Fatalf("no memory.available in %s", stdout.String())
	}
	const memTotal = 16384000 * 1024
	if mem.Capacity != memTotal || mem.Available != memTotal-(4<<30) || mem.Source == "" || mem.Age == "" {
		t.Errorf("memory.available %+v", mem)
	}
	if _, ok := signals[policy.SignalAllocatableMemoryPSISomeAvg10]; !ok {
		t.Error("no kubepods PSI on a cgroup v2 host")
	}
	if len(out.Pods) != 3 {
		t.Fatalf("%d pods discovered from the cgroup tree, want 3", len(out.Pods))
	}
	qos := map[string]int{}
	for _, p := range out.Pods {
		qos[p.QOSClass]++
		if p.MemoryWorkingSetBytes == nil || p.Processes == nil || p.Cgroup == "" {
			t.Errorf("pod %s lacks usage: %+v", p.UID, p)
		}
	}
	if qos["Guaranteed"] != 1 || qos["Burstable"] != 1 || qos["BestEffort"] != 1 {
		t.Errorf("QoS tiers of discovered pods: %v", qos)
	}
	if len(out.Filesystems) == 0 {
		t.Error("no filesystems")
	}
}

func TestObserveTableNamesEverySection(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runObserve([]string{"--once", "--no-cadvisor", "--host-root", fixtureHost, "--cgroup-driver", "systemd"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"SIGNAL", "memory.available", "pid.available", "FILESYSTEM", "nodefs", "layout:", "POD", "Burstable"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestObserveRejectsBadFlagsNamingThem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "yaml"}, `--output: value "yaml": must be json or table`},
		{[]string{"--memory-formula", "rss"}, `stats.memoryFormula "rss"`},
		{[]string{"--no-cadvisor", "--host-root", fixtureHost, "--cgroup-driver", "docker"}, `--cgroup-driver "docker": must be auto, cgroupfs or systemd`},
		{[]string{"--once", "--no-cadvisor", "--host-root", fixtureHost, "--cgroup-driver", "cgroupfs"}, `--cgroup-driver cgroupfs: this node's kubepods cgroup is /kubepods.slice (the systemd driver's)`},
	} {
		var stdout, stderr bytes.Buffer
		if code := runObserve(tc.args, &stdout, &stderr); code == 0 {
			t.Errorf("%v: exit 0", tc.args)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
		}
	}
}

// With no --cgroup-driver, every fixture layout is detected from its tree and
// its pods are listed (issue 31: the default used to list none on systemd).
func TestObserveDetectsTheLayoutByDefault(t *testing.T) {
	for tree, want := range map[string]string{"v2-systemd": "v2/systemd (driver from cgroupTree) /kubepods.slice", "v2-cgroupfs": "v2/cgroupfs (driver from cgroupTree) /kubepods", "v1-cgroupfs": "v1/cgroupfs (driver from cgroupTree) /kubepods"} {
		t.Run(tree, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runObserve([]string{"--once", "--no-cadvisor", "--host-root", "../../internal/monitor/testdata/" + tree}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), "CGROUP "+want+"  ") {
				t.Errorf("header lacks %q:\n%s", want, stdout.String())
			}
			for _, qos := range []string{"Guaranteed", "Burstable", "BestEffort"} {
				if !strings.Contains(stdout.String(), qos) {
					t.Errorf("no %s pod listed:\n%s", qos, stdout.String())
				}
			}
		})
	}
}

// observe --node lists pods from the API server; a static pod's mirror there
// has its own UID, and its cgroup goes by the kubelet's (the mirror annotation).
func TestObserveAPIListerReadsStaticPodsUnderTheirKubeletUID(t *testing.T) {
	mirror := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-n1", Namespace: "kube-system", UID: "aa11bb22-cc33-4d44-8e55-ff6677889900",
		Annotations: map[string]string{"kubernetes.io/config.mirror": "6f1b2c3d4e5f60718293a4b5c6d7e8f9"}},
		Spec: v1.PodSpec{NodeName: "n1"}, Status: v1.PodStatus{QOSClass: v1.PodQOSBurstable}}
	l := &apiPodLister{list: fake.NewClientset(mirror).CoreV1().Pods("").List, node: "n1"}
	refs, err := l.pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].UID != mirror.UID || refs[0].RuntimeUID != "6f1b2c3d4e5f60718293a4b5c6d7e8f9" || refs[0].QOSClass != "Burstable" {
		t.Errorf("refs %+v, want the mirror's UID with the kubelet's as RuntimeUID", refs)
	}
}
