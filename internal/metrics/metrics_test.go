package metrics

import (
	"testing"

	"github.com/evictiond/evictiond/internal/version"
)

func TestBuildInfoSaysWhatVersionSays(t *testing.T) {
	families, err := New().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := version.Get()
	for _, f := range families {
		if f.GetName() != "evictiond_build_info" {
			continue
		}
		if len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() != 1 {
			t.Fatalf("evictiond_build_info: %v, want one series of value 1", f.Metric)
		}
		got := map[string]string{}
		for _, l := range f.Metric[0].Label {
			got[l.GetName()] = l.GetValue()
		}
		if got["version"] != want.Version || got["revision"] != want.Revision || got["goversion"] != want.GoVersion {
			t.Errorf("labels %v, want %+v", got, want)
		}
		return
	}
	t.Fatal("no evictiond_build_info")
}
