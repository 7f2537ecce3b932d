package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestStampedVersionWinsOverBuildInfo(t *testing.T) {
	read := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fromtoolchain"}}}, true
	}
	got := get("v1.2.3", "abc123", read)
	want := Info{Version: "v1.2.3", Revision: "abc123", GoVersion: runtime.Version()}
	if got != want {
		t.Fatalf("get = %+v, want %+v", got, want)
	}
}

func TestUnstampedBuildReportsDevAndTheRecordedCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		ok       bool
		want     string
	}{
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "deadbeef"}, {Key: "vcs.modified", Value: "false"}}, true, "deadbeef"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.revision", Value: "deadbeef"}, {Key: "vcs.modified", Value: "true"}}, true, "deadbeef-dirty"},
		{"no vcs", nil, true, "unknown"},
		{"no build info", nil, false, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get("", "", func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: tc.settings}, tc.ok })
			if got.Version != "dev" || got.Revision != tc.want {
				t.Fatalf("get = %+v, want version dev, revision %s", got, tc.want)
			}
		})
	}
}
