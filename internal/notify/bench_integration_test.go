//go:build integration && linux

package notify

import (
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/policy"
)

// Wake latency from a memory threshold crossing to the decision loop waking,
// on this machine's kernel: a child process in a child memcg sits 4Mi below
// the threshold, then touches 8Mi; the latency runs from the CLOCK_MONOTONIC
// time just before its first touch to the moment a loop goroutine returns
// from its select on the Waker. It therefore includes the page faults of the
// first 4Mi before the actual crossing (touch-ms reports the whole 8Mi touch;
// about half of it precedes the crossing). The park is 4Mi, not less, because
// the kernel checks v1 thresholds only every 128 page events per CPU (about
// 512Ki), so a crossing by less may go unreported until the next check.
// Reported as p50-ms, p99-ms, max-ms and touch-p50-ms, and notified-p99-ms:
// the same up to the notifier's Wake call (kernel and reactor only, without
// the loop goroutine's scheduling).
//
//	go test -tags integration -run '^$' -bench WakeLatency -benchtime 300x ./internal/notify
func BenchmarkWakeLatencyMemcg(b *testing.B) {
	benchmarkWakeLatency(b, SourceMemcg, 0, func(dir string) Options {
		return Options{MemcgThresholds: true}
	})
}

// The same while the root memcg's thresholds are re-armed every 100ms (the
// node's inactive_file drifts): each registration blocks in the kernel for an
// RCU grace period, on the arming goroutine, not on the one serving events.
// rearms/op reports how many re-registrations happened per crossing.
func BenchmarkWakeLatencyMemcgWhileRearming(b *testing.B) {
	metrics := NewMetrics()
	benchmarkWakeLatency(b, SourceMemcg, 0, func(dir string) Options {
		return Options{
			MemcgThresholds: true,
			RearmInterval:   MinRearmInterval,
			Metrics:         metrics,
			Thresholds: []Threshold{
				{Signal: policy.SignalMemoryAvailable, Hard: true, Percentage: 0.05},
				{Signal: policy.SignalMemoryAvailable, Hard: false, Percentage: 0.10},
			},
		}
	})
	b.ReportMetric(testutil.ToFloat64(metrics.Rearms)/float64(b.N), "rearms/op")
}

// BenchmarkWakeLatencyPoll is the poll at a fixed 100ms (no pacing).
func BenchmarkWakeLatencyPoll(b *testing.B) {
	// The random pause before each crossing keeps the iterations from
	// locking onto the poll's phase (a crossing right after the wake of the
	// previous one would always wait a full interval).
	benchmarkWakeLatency(b, SourcePoll, DefaultPollInterval, func(dir string) Options {
		return Options{ReadMemory: memcgReader(dir), PollInterval: DefaultPollInterval, PollMinInterval: DefaultPollInterval, PollIdleInterval: DefaultPollInterval}
	})
}

// The paced poll (the default): parked 4Mi below the threshold it reads
// about every 4ms (headroom / the assumed 1Gi/s ramp). The ramp from rest
// is measured on cgroup v2 by BenchmarkCgroup2WakeLatencyRamp (make bench-cgroup2).
func BenchmarkWakeLatencyPollPaced(b *testing.B) {
	benchmarkWakeLatency(b, SourcePoll, DefaultPollInterval, func(dir string) Options {
		return Options{ReadMemory: memcgReader(dir), PollInterval: DefaultPollInterval}
	})
}

func benchmarkWakeLatency(b *testing.B, src Source, jitter time.Duration, options func(dir string) Options) {
	requireMemcgV1(b)
	name := uniqueName(b)
	dir := makeMemcg(b, name, 256*mib)
	h := startHelper(b, dir)

	opts := options(dir)
	opts.Mode = CgroupModeV1
	opts.KubepodsCgroup = name
	opts.Thresholds = append(opts.Thresholds, Threshold{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib})
	opts.Logger = nil
	w := NewWaker()
	m := startManager(b, opts, w)

	// The decision loop's stand-in: it records when it wakes, and when the
	// notifier called Wake (Wake.First, mapped from Go's monotonic clock to
	// CLOCK_MONOTONIC), to tell the notifier's share from the loop's.
	type wakeTimes struct{ at, notified time.Duration }
	goBase, monoBase := time.Now(), monotonicNow()
	wakes := make(chan wakeTimes, 16)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-w.C():
				at := monotonicNow()
				if wake := w.Take(); wake.Sources[src] > 0 {
					wakes <- wakeTimes{at: at, notified: monoBase + wake.First.Sub(goBase)}
				}
			}
		}
	}()
	b.Cleanup(func() { close(stop) })

	// Park usage 4Mi below the usage threshold (available = 64Mi + 4Mi).
	sample, err := readMemcgV1(dir, false, "/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	threshold := usageThreshold(sample, 64*mib)
	h.alloc(threshold - sample.Usage - 4*mib)
	time.Sleep(300 * time.Millisecond) // let the poll see the parked state

	// nextWake returns the first wake at or after since: a crossing may wake
	// the loop twice (the kernel event, and the re-arm noticing the side
	// change), and an older wake must not be taken for a newer crossing.
	nextWake := func(what string, since time.Duration) wakeTimes {
		timeout := time.After(2 * time.Second)
		for {
			select {
			case wt := <-wakes:
				if wt.at >= since {
					return wt
				}
			case <-timeout:
				b.Fatalf("no wake from %s within 2s after %s (usage %d, threshold %d); status %+v; pending %+v",
					src, what, readInt(b, dir+"/memory.usage_in_bytes"), threshold, m.Status(), w.Take())
				return wakeTimes{}
			}
		}
	}

	latencies := make([]time.Duration, 0, b.N)
	touches := make([]time.Duration, 0, b.N)
	notified := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if jitter > 0 {
			time.Sleep(rand.N(jitter))
		}
		start, end := h.allocTimed(8 * mib)
		touches = append(touches, end-start)
		wt := nextWake("crossing up", start)
		latencies = append(latencies, wt.at-start)
		notified = append(notified, wt.notified-start)
		down := monotonicNow()
		h.do("freelast")
		nextWake("crossing down", down) // the downward crossing wakes the loop too
	}
	b.StopTimer()

	pct := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(float64(len(ds)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(latencies, 0.50), "p50-ms")
	b.ReportMetric(pct(latencies, 0.99), "p99-ms")
	b.ReportMetric(pct(latencies, 1), "max-ms")
	b.ReportMetric(pct(touches, 0.50), "touch-p50-ms")
	b.ReportMetric(pct(notified, 0.99), "notified-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPollTickRealMemcg is one tick of the fast poll over a real v1
// memcg (limit, usage, memory.stat, /proc/meminfo) and the crossing check:
// what the poll costs every PollInterval.
func BenchmarkPollTickRealMemcg(b *testing.B) {
	requireMemcgV1(b)
	dir := makeMemcg(b, uniqueName(b), 256*mib)
	m, err := New(Options{
		Thresholds: []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}},
		ReadMemory: memcgReader(dir),
	}, NewWaker())
	if err != nil {
		b.Fatal(err)
	}
	met := map[string]bool{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m.pollOnce(met, "")
	}
}

// BenchmarkMemcgRearm is one re-arm of a moved v1 threshold: sample the
// memcg, register a new eventfd, unregister the old one.
func BenchmarkMemcgRearm(b *testing.B) {
	requireMemcgV1(b)
	dir := makeMemcg(b, uniqueName(b), 256*mib)
	for i := range b.N {
		if _, err := readMemcgV1(dir, false, "/proc/meminfo"); err != nil {
			b.Fatal(err)
		}
		efd, err := registerUsageThreshold(dir, 128*mib+int64(i%2)*4096)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(efd)
	}
}

// BenchmarkWakeLatencyPollRampFromFar: the poll alone (no memcg thresholds) on
// this machine's cgroup v1, a memcg of 1 GiB + 64Mi, a threshold of 64Mi on
// allocatableMemory.available: a child at rest ramps its memory use as fast as
// it touches pages from ~1 GiB away across the threshold. The latency runs from
// the moment its touch reached the threshold (CLOCK_MONOTONIC, in the child) to
// a loop goroutine returning from its select on the Waker (negative: the poll
// saw the kernel's count cross, which leads the touched bytes by up to ~1 MiB,
// before the touch did). "idle-1s" is the default poll (down to 5ms near a
// threshold, up to notifier.pollIdleInterval far from it); "far-100ms" the same
// poll never waiting longer than pollInterval far away (pollIdleInterval =
// pollInterval: the poll before the idle rule). A ramp below 8 GiB/s must not
// be seen later with the idle rule. Reports p50-ms, p99-ms, max-ms, the ramp's
// rate (ramp-MiB/s) and the reads a second at rest before the ramps (reads/s).
//
//	go test -tags integration -run '^$' -bench WakeLatencyPollRampFromFar -benchtime 20x ./internal/notify
func BenchmarkWakeLatencyPollRampFromFar(b *testing.B) {
	for _, tc := range []struct {
		name string
		idle time.Duration
	}{{"idle-1s", DefaultPollIdleInterval}, {"far-100ms", DefaultPollInterval}} {
		b.Run(tc.name, func(b *testing.B) { benchmarkRampFromFar(b, tc.idle) })
	}
}

func benchmarkRampFromFar(b *testing.B, idle time.Duration) {
	requireMemcgV1(b)
	const threshold = 64 * mib
	name := uniqueName(b)
	dir := makeMemcg(b, name, threshold+1<<30)
	h := startHelper(b, dir)
	w := NewWaker()
	metrics := NewMetrics()
	startManager(b, Options{
		Mode: CgroupModeV1, KubepodsCgroup: name, Logger: slog.New(slog.DiscardHandler), Metrics: metrics,
		Thresholds:       []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: threshold}},
		ReadMemory:       memcgReader(dir),
		PollIdleInterval: idle,
	}, w)
	reads0 := testutil.ToFloat64(metrics.PollReads)
	time.Sleep(3 * time.Second)
	readsPerSecond := (testutil.ToFloat64(metrics.PollReads) - reads0) / 3
	benchmarkRamps(b, h, w, threshold, time.Second, time.Second, func() (int64, error) {
		s, err := readMemcgV1(dir, false, "/proc/meminfo")
		return s.Available(), err
	})
	b.ReportMetric(readsPerSecond, "reads/s")
}

// benchmarkRamps runs b.N ramps of the helper's memory from rest across
// threshold, each after a pause of rest plus up to jitter (no lock-step with
// the poll's phase), and reports the latency from the moment the touch reached
// the threshold to the loop's wake by the poll (p50-ms, p99-ms, max-ms) and the
// ramps' rate (ramp-MiB/s). available reads the signal the manager watches.
func benchmarkRamps(b *testing.B, h *helper, w *Waker, threshold int64, rest, jitter time.Duration, available func() (int64, error)) {
	wakes := make(chan time.Duration, 64)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-w.C():
				at := monotonicNow()
				if w.Take().Sources[SourcePoll] > 0 {
					wakes <- at
				}
			}
		}
	}()
	b.Cleanup(func() { close(stop) })
	nextWake := func(what string, since time.Duration) time.Duration {
		timeout := time.After(5 * time.Second)
		for {
			select {
			case at := <-wakes:
				if at >= since {
					return at
				}
			case <-timeout:
				b.Fatalf("no poll wake within 5s after %s", what)
				return 0
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	var latencies []time.Duration
	var rampBytes int64
	var rampTime time.Duration
	b.ResetTimer()
	for range b.N {
		time.Sleep(rest + rand.N(jitter))
		avail, err := available()
		if err != nil {
			b.Fatal(err)
		}
		headroom := avail - threshold
		n := headroom + 32*mib
		reply := h.do("ramp %d %d", n, headroom)
		start, _ := strconv.ParseInt(reply[0], 10, 64)
		end, _ := strconv.ParseInt(reply[1], 10, 64)
		marked, _ := strconv.ParseInt(reply[2], 10, 64)
		at := nextWake("crossing up", time.Duration(start))
		latencies = append(latencies, at-time.Duration(marked))
		rampBytes += n
		rampTime += time.Duration(end - start)
		down := monotonicNow()
		h.do("freelast")
		nextWake("crossing down", down)
	}
	b.StopTimer()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(float64(len(latencies)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
	b.ReportMetric(float64(rampBytes)/float64(mib)/rampTime.Seconds(), "ramp-MiB/s")
	b.ReportMetric(0, "ns/op")
}
