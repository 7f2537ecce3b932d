//go:build integration

package kube

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/reclaim"
	"github.com/evictiond/evictiond/internal/testenv/containerd"
)

// TestAPIServerKilledUnderHardPressureStopsPodThroughRealCRI kills the real API server
// while a hard threshold holds and proves that the chosen pod's sandbox, run by a real
// containerd, is stopped through the CRI, and that the stop is reported once the API
// server is back.
func TestAPIServerKilledUnderHardPressureStopsPodThroughRealCRI(t *testing.T) {
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := ctrd.ImportSandboxImage(ctx); err != nil {
		t.Fatal(err)
	}
	logger := klog.Background()
	rt, err := criclient.NewRemoteRuntimeService(ctrd.Endpoint, 30*time.Second, nil, &logger)
	if err != nil {
		t.Fatalf("CRI runtime client: %v", err)
	}

	n := newTestNode(t)
	inf := n.startInformers(t, nil)
	hog := createPod(t, n.namespace, "hog", n.name, nil, nil)
	bystander := createPod(t, n.namespace, "bystander", n.name, nil, nil)
	waitForPodInCache(t, inf, hog, bystander)
	runSandbox := func(name, uid string) string {
		id, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: n.namespace, Uid: uid},
			Labels:   map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": n.namespace},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			}},
		}, "")
		if err != nil {
			t.Fatalf("RunPodSandbox %s: %v\n--- containerd log ---\n%s", name, err, ctrd.LogTail(30))
		}
		return id
	}
	hogSandbox := runSandbox(hog.Name, string(hog.UID))
	bystanderSandbox := runSandbox(bystander.Name, string(bystander.UID))
	sandboxState := func(id string) runtimeapi.PodSandboxState {
		status, err := rt.PodSandboxStatus(ctx, id, false)
		if err != nil {
			t.Fatalf("PodSandboxStatus %s: %v", id, err)
		}
		return status.Status.State
	}

	journal := filepath.Join(t.TempDir(), "local-stops.json")
	stopper, err := reclaim.New(reclaim.Options{RuntimeEndpoint: ctrd.Endpoint, StateFile: filepath.Join(t.TempDir(), "images.json")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopper.Close() })
	withLocalStop := func(o *EvictorOptions) {
		o.LocalStop = LocalStopOptions{Enabled: true, Stopper: stopper, After: 2 * time.Second, JournalPath: journal}
		o.APITimeout = 2 * time.Second
	}
	ev := newTestEvictor(t, n, inf, withLocalStop)
	env.StopAPIServer()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.StartAPIServer()
		}
	})
	var res eviction.Result
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		res = ev.Evict(ctx, []Candidate{candidateFor(hog, true), candidateFor(bystander, true)})
		if res.Outcome == eviction.OutcomeStoppedLocally {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if res.Outcome != eviction.OutcomeStoppedLocally || res.Victim.Pod.UID != hog.UID {
		t.Fatalf("with the API server killed: outcome %s (err %v); want the first candidate stopped locally", res.Outcome, res.Err)
	}
	if got := sandboxState(hogSandbox); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("hog sandbox state = %s, want stopped", got)
	}
	if got := sandboxState(bystanderSandbox); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("bystander sandbox state = %s, want still running", got)
	}
	// Idempotent: stopping a pod whose sandbox is already stopped is no error.
	if err := stopper.StopPodSandboxByPodUID(ctx, hog.UID); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	// evictiond restarts before the API server is back: the stop is in its journal.
	afterRestart := newTestEvictor(t, n, inf, withLocalStop)
	if afterRestart.PendingLocalStops() != 1 {
		t.Fatalf("local stops pending after a restart = %d, want 1 from the journal", afterRestart.PendingLocalStops())
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if reported, err := afterRestart.ReportLocalStops(ctx); reported != 1 || err != nil {
		t.Fatalf("ReportLocalStops = %d, %v", reported, err)
	}
	event := waitForEvent(t, n.namespace, "Pod", hog.Name, EventReasonStoppedLocally)
	if event.InvolvedObject.UID != hog.UID || event.Annotations["starved_resource"] != "memory" {
		t.Fatalf("PodStoppedLocally event = %+v", event)
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Fatalf("journal still present after reporting: %v", err)
	}
}
