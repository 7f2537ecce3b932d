package notify

import (
	"sync"
	"testing"
	"time"
)

func TestWakerCoalescesBurstIntoOnePendingWake(t *testing.T) {
	w := NewWaker()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { w.Wake(SourceMemcg) })
	}
	wg.Go(func() { w.Wake(SourcePSI) })
	wg.Wait()

	select {
	case <-w.C():
	default:
		t.Fatal("no wake pending after 51 notifications")
	}
	select {
	case <-w.C():
		t.Fatal("a second wake was pending: notifications were not coalesced")
	default:
	}
	got := w.Take()
	if got.Sources[SourceMemcg] != 50 || got.Sources[SourcePSI] != 1 {
		t.Fatalf("Take().Sources = %v, want memcg:50 psi:1", got.Sources)
	}
	if got.First.IsZero() || time.Since(got.First) > time.Minute {
		t.Fatalf("Take().First = %v, want the time of the first notification", got.First)
	}
	if again := w.Take(); again.Sources != nil {
		t.Fatalf("second Take() = %v, want nothing pending", again.Sources)
	}
}

func TestWakerWakesAgainAfterTake(t *testing.T) {
	w := NewWaker()
	w.Wake(SourcePoll)
	<-w.C()
	w.Take()
	w.Wake(SourceMemoryEvents)
	select {
	case <-w.C():
	case <-time.After(time.Second):
		t.Fatal("no wake after Take and a new notification")
	}
	if got := w.Take(); got.Sources[SourceMemoryEvents] != 1 {
		t.Fatalf("Take().Sources = %v, want memory_events:1", got.Sources)
	}
}

// BenchmarkWakerWake is the cost a notifier pays per notification.
func BenchmarkWakerWake(b *testing.B) {
	w := NewWaker()
	for range b.N {
		w.Wake(SourceMemcg)
	}
}
