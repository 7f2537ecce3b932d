package notify

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// pollTrail keeps the fast poll's last reads, so that the read that first
// finds a memory threshold met can say how the reads before it were paced: a
// crossing read late is either a ramp faster than the pacer assumed (the
// headroom fell more between two reads than the wait allowed for), a read
// that took long in the kernel, or one that came later than the wait it was
// given (the thread waited for a CPU).
// Written and read by the poll's goroutine only.
type pollTrail struct {
	n    int // reads recorded, the newest at ring[(n-1)%len]
	ring [8]pollMark
	// queuedNext is the run delay for the next record, when queuedSet (queue).
	queuedNext time.Duration
	queuedSet  bool
}

type pollMark struct {
	at time.Time
	// headroom is the smallest of the memory signals' available bytes
	// above their thresholds (negative: met); noHeadroom when the read had
	// none (a failed read, or PID thresholds only).
	headroom int64
	took     time.Duration // the read's own time (files of the node's cgroups)
	next     time.Duration // the pacer's wait after this read; 0 until set
	// queued is the poll thread's run delay (runnable, not running) since
	// the read before: -1 unknown (the poll is not on its own thread).
	queued time.Duration
}

const noHeadroom = math.MinInt64

func (t *pollTrail) record(at time.Time, headroom int64, took time.Duration) {
	m := pollMark{at: at, headroom: headroom, took: took, queued: -1}
	if t.queuedSet {
		m.queued = t.queuedNext
	}
	t.ring[t.n%len(t.ring)] = m
	t.n++
	t.queuedSet = false
}

// queue sets the run delay of the next read recorded (negative: unknown).
func (t *pollTrail) queue(d time.Duration) { t.queuedNext, t.queuedSet = d, d >= 0 }

// paced sets the wait the pacer chose after the newest read.
func (t *pollTrail) paced(d time.Duration) {
	if t.n > 0 {
		t.ring[(t.n-1)%len(t.ring)].next = d
	}
}

// String lists the kept reads, oldest first, as offsets from the newest:
// "-212ms headroom 330MiB queued 10µs read 300µs wait 100ms; …; 0s headroom
// -12MiB queued 40µs read 280µs". queued is the time the poll's thread waited
// for a CPU since the read before; read, the read's own time.
func (t *pollTrail) String() string {
	if t.n == 0 {
		return ""
	}
	newest := t.ring[(t.n-1)%len(t.ring)].at
	var parts []string
	for i := max(0, t.n-len(t.ring)); i < t.n; i++ {
		m := t.ring[i%len(t.ring)]
		s := fmt.Sprintf("%v", m.at.Sub(newest).Round(100*time.Microsecond))
		if m.headroom != noHeadroom {
			s += fmt.Sprintf(" headroom %dMiB", m.headroom>>20)
		}
		if m.queued >= 0 {
			s += fmt.Sprintf(" queued %v", m.queued.Round(10*time.Microsecond))
		}
		s += fmt.Sprintf(" read %v", m.took.Round(10*time.Microsecond))
		if m.next > 0 {
			s += fmt.Sprintf(" wait %v", m.next.Round(100*time.Microsecond))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
