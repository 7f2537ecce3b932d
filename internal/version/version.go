// Package version is the build's identity: the version and revision `make`
// stamps with -ldflags -X (hack/version.sh, from git), else what the Go
// toolchain recorded from the checkout (`go build`, `go run`).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped by the Makefile: -X github.com/evictiond/evictiond/internal/version.version=...
var (
	version  string
	revision string
)

// Info says which evictiond this is.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
}

// Get is this binary's identity. An unstamped build reports version "dev"
// and the commit the toolchain recorded ("-dirty" when the tree had
// changes), so no binary ever says nothing.
func Get() Info {
	return get(version, revision, debug.ReadBuildInfo)
}

func get(v, rev string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: v, Revision: rev, GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Revision == "" {
		if bi, ok := read(); ok {
			var modified bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Revision = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if modified && info.Revision != "" {
				info.Revision += "-dirty"
			}
		}
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// String is the one line `evictiond version` prints.
func (i Info) String() string {
	return fmt.Sprintf("evictiond %s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}
