package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run fails at start, naming the flag, when the node contradicts an explicit
// --cgroup-driver: the same check observe makes (both go through monitor.New).
func TestRunFailsAtStartOnAContradictedCgroupDriver(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	write := func(p, data string) {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(config, "apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nreclaim:\n  criEndpoint: unix://"+filepath.Join(dir, "no-runtime.sock")+
		"\n  imageGC: {stateFile: "+filepath.Join(dir, "images.json")+"}\n")
	// Never dialled: start-up stops before the first API call.
	write(kubeconfig, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	var stdout, stderr bytes.Buffer
	code := runRun([]string{"--config", config, "--kubeconfig", kubeconfig, "--node-name", "n1",
		"--metrics-address", "127.0.0.1:0", "--health-address", "127.0.0.1:0", "--metrics-secure=false",
		"--host-root", fixtureHost, "--cgroup-driver", "cgroupfs"}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if want := `--cgroup-driver cgroupfs: this node's kubepods cgroup is /kubepods.slice (the systemd driver's)`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
}
