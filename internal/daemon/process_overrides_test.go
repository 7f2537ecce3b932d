package daemon

import (
	"testing"

	"github.com/evictiond/evictiond/internal/policy"
)

func TestRunUsesTheDetectedRuntimeOnlyWhenTheConfigurationNamesNone(t *testing.T) {
	var o ProcessOptions
	detected := "unix:///host/run/crio/crio.sock"
	var unset, set policy.Config
	set.Reclaim.CRIEndpoint = "unix:///run/containerd/containerd.sock"
	o.applyOverrides(&unset, detected)
	o.applyOverrides(&set, detected)
	if unset.Reclaim.CRIEndpoint != "unix:///host/run/crio/crio.sock" {
		t.Errorf("unset reclaim.criEndpoint became %q, want the detected socket", unset.Reclaim.CRIEndpoint)
	}
	if set.Reclaim.CRIEndpoint != "unix:///run/containerd/containerd.sock" {
		t.Errorf("configured reclaim.criEndpoint became %q, want it kept", set.Reclaim.CRIEndpoint)
	}
}
