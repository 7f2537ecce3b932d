package notify

import (
	"sync"
	"time"
)

// Waker wakes the single decision loop. Any number of notifiers may call Wake
// at any rate; the loop sees at most one pending wake, however many arrived
// since its last pass (a burst of memcg crossings and PSI events must cost one
// pass, not one each).
//
// The loop selects on C() next to its ticker and calls Take to learn what woke
// it.
type Waker struct {
	c chan struct{}

	mu      sync.Mutex
	pending Wake
}

// Wake is what accumulated since the loop last took it.
type Wake struct {
	// Sources and how many notifications each delivered.
	Sources map[Source]int
	// First is when the first of them arrived (monotonic), so the loop can
	// measure its own wake latency.
	First time.Time
}

// NewWaker returns a Waker with nothing pending.
func NewWaker() *Waker {
	return &Waker{c: make(chan struct{}, 1)}
}

// Wake records a notification from src and wakes the loop unless a wake is
// already pending. It never blocks.
func (w *Waker) Wake(src Source) {
	now := time.Now()
	w.mu.Lock()
	if w.pending.Sources == nil {
		w.pending = Wake{Sources: map[Source]int{}, First: now}
	}
	w.pending.Sources[src]++
	w.mu.Unlock()
	select {
	case w.c <- struct{}{}:
	default: // a wake is already pending: coalesced
	}
}

// C is the channel the loop selects on.
func (w *Waker) C() <-chan struct{} { return w.c }

// Take returns and clears what is pending. Notifications that arrive after
// Take wake the loop again.
func (w *Waker) Take() Wake {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.pending
	w.pending = Wake{}
	return out
}
