//go:build linux

package notify

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/policy"
)

// The poll's kernel sleeper: the calling goroutine's thread becomes the sentinel, it sleeps the
// whole interval, it wakes at once when ctx ends, and release lowers the sentinel.
func TestKernelSleeperOnItsSentinelThread(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var sentinelTID, releasedTID int
	sentinel := func() func() {
		tid := unix.Gettid()
		mu.Lock()
		sentinelTID = tid
		mu.Unlock()
		return func() {
			mu.Lock()
			releasedTID = tid
			mu.Unlock()
		}
	}
	errs := make(chan string, 8)
	go func() {
		defer close(errs)
		sleep, release, err := newKernelSleeper(ctx, sentinel)
		if err != nil {
			errs <- err.Error()
			return
		}
		defer release()
		mu.Lock()
		tid := sentinelTID
		mu.Unlock()
		if tid != unix.Gettid() {
			errs <- "the sentinel is not the sleeping goroutine's thread"
		}
		start := time.Now()
		if !sleep(30 * time.Millisecond) {
			errs <- "sleep(30ms) returned false with ctx alive"
		}
		if took := time.Since(start); took < 30*time.Millisecond {
			errs <- "sleep(30ms) returned after " + took.String()
		}
		if unix.Gettid() != tid {
			errs <- "the goroutine left its locked thread"
		}
		time.AfterFunc(50*time.Millisecond, cancel)
		start = time.Now()
		if sleep(time.Hour) {
			errs <- "sleep(1h) returned true: ctx ended"
		}
		if took := time.Since(start); took > 10*time.Second {
			errs <- "sleep(1h) took " + took.String() + " after ctx ended at 50ms"
		}
	}()
	for e := range errs {
		t.Error(e)
	}
	mu.Lock()
	defer mu.Unlock()
	if sentinelTID == 0 || releasedTID != sentinelTID {
		t.Errorf("sentinel thread %d, released %d: want the same, released", sentinelTID, releasedTID)
	}
}

// With a Sentinel, the manager's poll runs on a sentinel thread, and lowers it when it stops.
func TestPollRunsOnASentinelThread(t *testing.T) {
	const mi = 1 << 20
	var mu sync.Mutex
	registered, released := map[int]bool{}, map[int]bool{}
	reads := make(chan int, 100)
	m, err := New(Options{
		Thresholds: []Threshold{{Signal: policy.SignalPIDAvailable, Hard: true, Available: 100}},
		ReadMemory: func() (policy.Observations, error) {
			select {
			case reads <- unix.Gettid():
			default:
			}
			return policy.Observations{policy.SignalPIDAvailable: {Available: 1000 * mi, Capacity: 2000 * mi, Time: time.Now()}}, nil
		},
		Sentinel: func() func() {
			tid := unix.Gettid()
			mu.Lock()
			registered[tid] = true
			mu.Unlock()
			return func() {
				mu.Lock()
				released[tid] = true
				mu.Unlock()
			}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	for range 3 {
		select {
		case tid := <-reads:
			mu.Lock()
			ok := registered[tid]
			mu.Unlock()
			if !ok {
				t.Fatalf("the poll read on thread %d, not a sentinel (%v)", tid, registered)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no poll read in 10s")
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for tid := range registered {
		if !released[tid] {
			t.Errorf("sentinel thread %d not released after the manager stopped", tid)
		}
	}
}

// TestThreadRunDelayReadsTheLockedThreadsSchedstat: the reader answers, and
// the run delay it reads never goes back.
func TestThreadRunDelayReadsTheLockedThreadsSchedstat(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		read, closeRD, err := threadRunDelay()
		if err != nil {
			t.Errorf("threadRunDelay: %v", err)
			return
		}
		defer closeRD()
		first, ok := read()
		if !ok {
			t.Error("first read of /proc/thread-self/schedstat failed")
			return
		}
		for range 1000 {
			runtime.Gosched()
		}
		second, ok := read()
		if !ok || second < first {
			t.Errorf("run delay went from %v to %v (ok %v)", first, second, ok)
		}
	}()
	<-done
}
