package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/kube/kubefake"
	"github.com/evictiond/evictiond/internal/simulate"
)

// eviction is one pod taken down, as the API server saw it or simulate reports it.
type eviction struct {
	At   time.Duration
	Pod  string // namespace/name
	Kind string // evict or delete
}

func (e eviction) String() string { return fmt.Sprintf("%v %s %s", e.At, e.Kind, e.Pod) }

// TestSimulateAgreesWithTheDaemon plays every shipped scenario through
// `evictiond simulate` and through the daemon as `evictiond run` wires it
// (node informers, Event recorder and node status writer on a fake API
// server, the scenario's stats on a virtual clock), and requires the same
// evictions in the same order at the same virtual times.
func TestSimulateAgreesWithTheDaemon(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios under examples/ (%v)", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			fromSimulate := simulateEvictions(t, file)
			fromDaemon := daemonEvictions(t, file)
			if len(fromSimulate) == 0 {
				t.Fatalf("the scenario evicts nothing: the comparison would prove nothing")
			}
			if !slices.Equal(fromSimulate, fromDaemon) {
				t.Fatalf("evictions differ\nsimulate: %v\ndaemon:   %v", fromSimulate, fromDaemon)
			}
		})
	}
}

func simulateEvictions(t *testing.T, file string) []eviction {
	code, stdout, stderr := run("simulate", "-f", file)
	if code != 0 {
		t.Fatalf("evictiond simulate -f %s: exit %d: %s", file, code, stderr)
	}
	var res simulate.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	var out []eviction
	for _, s := range res.Steps {
		at, err := time.ParseDuration(s.At)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range s.LocalStorage {
			out = append(out, eviction{At: at, Pod: e.Pod, Kind: "evict"})
		}
		for _, e := range s.Escalated { // a soft eviction requested again, before the pass's eviction
			out = append(out, eviction{At: at, Pod: e.Pod, Kind: "evict"})
		}
		if r := s.LivelockRestart; r != nil && r.Action == "evict" && r.Outcome == "evicted" { // before the threshold's
			out = append(out, eviction{At: at, Pod: r.Pod, Kind: "evict"})
		}
		if s.Eviction != nil {
			kind := "evict"
			if s.EvictionOutcome == "deleted" {
				kind = "delete"
			}
			out = append(out, eviction{At: at, Pod: s.Eviction.Pod, Kind: kind})
		}
	}
	return out
}

func daemonEvictions(t *testing.T, file string) []eviction {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc, cfg, err := simulate.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := simulate.ParseSteps(sc)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(simulate.Epoch)
	node := simulate.NewNode(sc, clk.Now)
	client, err := node.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client, Node: node, Clock: clk},
		daemon.Options{NodeName: node.Name, SelfUID: types.UID(sc.Self), NodeStatus: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() { cancel(); d.Close() }() // the informers stop with ctx; Close waits for them

	var out []eviction
	for _, st := range steps {
		clk.SetTime(simulate.Epoch.Add(st.At))
		before := node.Pods()
		node.Apply(st.Input)
		syncPods(t, client.Store(), before, node.Pods())
		waitForCache(t, d, node.Pods())
		seen := len(client.Actions())
		d.Agent.Pass(ctx, "test")
		for _, a := range client.Actions()[seen:] {
			switch {
			case a.Verb == "create" && a.Resource == "pods" && a.Subresource == "eviction":
				ev := a.Object.(*policyv1.Eviction)
				if !st.Input.Refused[*ev.DeleteOptions.Preconditions.UID] { // the API server answered 201
					out = append(out, eviction{At: st.At, Pod: ev.Namespace + "/" + ev.Name, Kind: "evict"})
				}
			case a.Verb == "delete" && a.Resource == "pods":
				out = append(out, eviction{At: st.At, Pod: a.Namespace + "/" + a.Name, Kind: "delete"})
			}
		}
	}
	return out
}

// syncPods makes the API server hold the node's pods after a step, as a
// kubelet's deletions and a scheduler's bindings would.
func syncPods(t *testing.T, store *kubefake.Store, before, after []*v1.Pod) {
	t.Helper()
	had := map[types.UID]bool{}
	for _, p := range before {
		had[p.UID] = true
	}
	has := map[types.UID]bool{}
	for _, p := range after {
		has[p.UID] = true
		if !had[p.UID] {
			if err := store.Add(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range before {
		if !has[p.UID] {
			if err := store.Delete("pods", p.Namespace, p.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitForCache waits until the daemon's pod informer holds exactly want.
func waitForCache(t *testing.T, d *daemon.Daemon, want []*v1.Pod) {
	t.Helper()
	uids := func(pods []*v1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, string(p.UID))
		}
		slices.Sort(out)
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := d.Informers.Pods.List(labels.Everything())
		if err == nil && slices.Equal(uids(got), uids(want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod informer holds %v, want %v", uids(got), uids(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
