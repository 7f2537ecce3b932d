//go:build integration && linux

package notify

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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
// Reported as p50-ms, p99-ms, max-ms and touch-p50-ms.
//
//	go test -tags integration -run '^$' -bench WakeLatency -benchtime 300x ./internal/notify
func BenchmarkWakeLatencyMemcg(b *testing.B) {
	benchmarkWakeLatency(b, SourceMemcg, 0, func(dir string) Options {
		return Options{MemcgThresholds: true}
	})
}

func BenchmarkWakeLatencyPoll(b *testing.B) {
	// The random pause before each crossing keeps the iterations from
	// locking onto the poll's phase (a crossing right after the wake of the
	// previous one would always wait a full interval).
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
	opts.Thresholds = []Threshold{{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 64 * mib}}
	opts.Logger = nil
	w := NewWaker()
	m := startManager(b, opts, w)

	// The decision loop's stand-in: it records when it wakes.
	wakes := make(chan time.Duration, 16)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-w.C():
				at := monotonicNow()
				if w.Take().Sources[src] > 0 {
					wakes <- at
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
	_ = m

	nextWake := func(what string) time.Duration {
		select {
		case at := <-wakes:
			return at
		case <-time.After(2 * time.Second):
			b.Fatalf("no wake from %s within 2s after %s (usage %d, threshold %d)", src, what, readInt(b, dir+"/memory.usage_in_bytes"), threshold)
			return 0
		}
	}
	drainWakes := func() {
		for {
			select {
			case <-wakes:
			default:
				return
			}
		}
	}

	latencies := make([]time.Duration, 0, b.N)
	touches := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if jitter > 0 {
			time.Sleep(rand.N(jitter))
		}
		drainWakes()
		start, end := h.allocTimed(8 * mib)
		touches = append(touches, end-start)
		latencies = append(latencies, nextWake("crossing up")-start)
		h.do("freelast")
		nextWake("crossing down") // the downward crossing wakes the loop too
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
	b.ReportMetric(0, "ns/op")
}
