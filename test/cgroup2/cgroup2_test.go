//go:build cgroup2

// Package cgroup2 is the cgroup v2 test tier (make test-cgroup2): it boots
// Debian's stock kernel in qemu with cgroup v2 only (internal/testenv/vm),
// runs the v2 integration tests of internal/notify and internal/monitor
// there as static test binaries, and reports every guest test as a subtest
// here. A guest test that fails, is skipped or never reports fails this one.
package cgroup2

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/testenv/vm"
)

// moduleRoot is where `go test -c` builds from (this package is test/cgroup2).
const moduleRoot = "../.."

func suites() []*vm.Suite {
	return []*vm.Suite{
		{Name: "notify", Package: "./internal/notify", Tags: "integration cgroup2", Run: "^TestCgroup2"},
		{Name: "monitor", Package: "./internal/monitor", Tags: "integration cgroup2", Run: "^TestCgroup2"},
	}
}

func TestCgroup2VM(t *testing.T) {
	kernel, err := vm.Kernel()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	ss := suites()
	start := time.Now()
	if err := os.Chdir(moduleRoot); err != nil {
		t.Fatal(err)
	}
	if err := vm.BuildSuites(ctx, dir, ss); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d static test binaries in %v", len(ss), time.Since(start).Round(time.Millisecond))
	res, err := vm.Run(ctx, vm.Options{
		Kernel:  kernel,
		Dir:     dir,
		Files:   vm.Files(ss),
		Script:  vm.Script(ss),
		Disk:    true,
		Timeout: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM: /init after %v, powered off after %v, script exit %d", res.Boot.Round(time.Millisecond), res.Total.Round(time.Millisecond), res.ExitStatus)
	results, err := vm.ParseSuites(ctx, res.Output, ss)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) { vm.Mirror(t, s, results[s.Name]) })
	}
}
