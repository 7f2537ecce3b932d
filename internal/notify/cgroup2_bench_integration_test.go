//go:build integration && cgroup2 && linux

package notify

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/policy"
)

// BenchmarkCgroup2WakeLatencyRamp: on cgroup v2 (no memcg threshold events)
// a pod ramps its memory use from rest, as fast as this machine touches
// pages, across a 64Mi threshold on allocatableMemory.available; the latency
// runs from the moment its touch reached the threshold (CLOCK_MONOTONIC, in
// the helper) to a loop goroutine returning from its select on the Waker.
// The kernel's count leads the touched bytes a little (page tables, the
// per-CPU charge batch of 64 pages): a poll may see the crossing up to about
// 1 MiB before the touch reaches it, so latencies can be slightly negative
// and figures are accurate to about 1 MiB of ramp (5 ms at 200 MiB/s).
// "adaptive" is the default poll (100ms, down to 5ms near a threshold, up to
// 1s far from it);
// "fixed-100ms" the poll without pacing, as before. Reports p50-ms, p99-ms,
// max-ms and the ramp's rate (ramp-MiB/s). make bench-cgroup2 runs it in the VM.
func BenchmarkCgroup2WakeLatencyRamp(b *testing.B) {
	for _, tc := range []struct {
		name string
		min  time.Duration
	}{{"adaptive", DefaultPollMinInterval}, {"fixed-100ms", DefaultPollInterval}} {
		b.Run(tc.name, func(b *testing.B) { benchmarkRamp(b, tc.min) })
	}
}

func benchmarkRamp(b *testing.B, minInterval time.Duration) {
	requireCgroup2(b)
	name, kubepods, pod := makeKubepodsV2(b)
	writeFile(b, filepath.Join(kubepods, "memory.max"), strconv.FormatInt(320*mib, 10))
	h := startHelper(b, pod)
	const threshold = 64 * mib
	w := NewWaker()
	startManager(b, Options{
		Mode: CgroupModeV2, KubepodsCgroup: name, Logger: discardLogger(),
		Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: threshold}},
		ReadMemory:      v2Reader(kubepods),
		PollMinInterval: minInterval, PollIdleInterval: fixedIdle(minInterval),
	}, w)
	benchmarkRamps(b, h, w, threshold, 0, 100*time.Millisecond, func() (int64, error) {
		s, err := readV2(kubepods)
		return s.Available(), err
	})
}

// BenchmarkCgroup2PollIdleCPU is the CPU the fast poll costs on a node far
// from its thresholds (memory use flat), in percent of one core, measured
// over 5 s of this process's own CPU time (getrusage): adaptive and fixed.
func BenchmarkCgroup2PollIdleCPU(b *testing.B) {
	for _, tc := range []struct {
		name string
		min  time.Duration
	}{{"adaptive", DefaultPollMinInterval}, {"fixed-100ms", DefaultPollInterval}} {
		b.Run(tc.name, func(b *testing.B) {
			requireCgroup2(b)
			name, kubepods, _ := makeKubepodsV2(b)
			writeFile(b, filepath.Join(kubepods, "memory.max"), strconv.FormatInt(1<<30, 10))
			startManager(b, Options{
				Mode: CgroupModeV2, KubepodsCgroup: name, Logger: discardLogger(),
				Thresholds:      []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
				ReadMemory:      v2Reader(kubepods),
				PollMinInterval: tc.min, PollIdleInterval: fixedIdle(tc.min),
			}, NewWaker())
			const window = 5 * time.Second
			b.ResetTimer()
			var cpu time.Duration
			for range b.N {
				before := cpuTime()
				time.Sleep(window)
				cpu += cpuTime() - before
			}
			b.ReportMetric(100*cpu.Seconds()/(window.Seconds()*float64(b.N)), "cpu-%")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fixedIdle: the "fixed-100ms" cases poll every 100ms far from the threshold
// too (pollIdleInterval = pollInterval); the adaptive ones take the default.
func fixedIdle(minInterval time.Duration) time.Duration {
	if minInterval == DefaultPollInterval {
		return DefaultPollInterval
	}
	return 0
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
