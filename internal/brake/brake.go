package brake

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Hold is a pod the brake froze.
type Hold struct {
	UID    types.UID
	Pod    string // namespace/name, for logs and Events
	Cgroup PodCgroup
	// FrozenAt is when the kernel confirmed the freeze; FreezeTook how long
	// the freeze took from the write.
	FrozenAt   time.Time
	FreezeTook time.Duration
	// StillFreezing, when not nil, is PodCgroup.Freeze's ErrStillFreezing:
	// the kernel had not confirmed the freeze, and FrozenAt is when Freeze
	// stopped waiting for it, every task in user space stopped and the rest
	// stopping as they leave the kernel. Kill, Thaw and the deadline work the
	// same.
	StillFreezing error
	// Deadline is when the hold thaws by itself (brake.maxFreeze).
	Deadline time.Time

	timer *time.Timer
}

// Brake keeps the pods it froze, each bounded in time: a hold not ended by
// Thaw or Kill before its deadline is thawed from a timer, so a stuck
// eviction (the API server slow or down, the agent wedged) never leaves a
// pod frozen. It is safe for concurrent use (the timers run on their own
// goroutines).
type Brake struct {
	mu       sync.Mutex
	held     map[types.UID]*Hold
	onExpire func(Hold, error)
}

// New returns a Brake; onExpire, if not nil, is called (from the timer's
// goroutine) after a hold reached its deadline and was thawed, with the
// thaw's error.
func New(onExpire func(Hold, error)) *Brake {
	return &Brake{held: map[types.UID]*Hold{}, onExpire: onExpire}
}

// Freeze freezes the pod's cgroup and holds it for at most maxFreeze.
// Freezing a pod already held keeps the first hold and its deadline.
func (b *Brake) Freeze(uid types.UID, pod string, cg PodCgroup, maxFreeze time.Duration) (Hold, error) {
	if uid == "" {
		return Hold{}, fmt.Errorf("freeze pod %q: UID is empty", pod)
	}
	if maxFreeze <= 0 {
		return Hold{}, fmt.Errorf("freeze pod %s: maxFreeze %v: must be positive", pod, maxFreeze)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.held[uid]; ok {
		return *h, nil
	}
	start := time.Now()
	err := cg.Freeze()
	if err != nil && !errors.Is(err, ErrStillFreezing) {
		return Hold{}, fmt.Errorf("freeze pod %s: %w", pod, err)
	}
	now := time.Now()
	h := &Hold{UID: uid, Pod: pod, Cgroup: cg, FrozenAt: now, FreezeTook: now.Sub(start), StillFreezing: err,
		Deadline: now.Add(maxFreeze)}
	h.timer = time.AfterFunc(maxFreeze, func() { b.expire(uid, h) })
	b.held[uid] = h
	return *h, nil
}

func (b *Brake) expire(uid types.UID, h *Hold) {
	b.mu.Lock()
	if b.held[uid] != h {
		b.mu.Unlock()
		return // ended meanwhile
	}
	delete(b.held, uid)
	err := h.Cgroup.Thaw()
	b.mu.Unlock()
	if b.onExpire != nil {
		b.onExpire(*h, err)
	}
}

// take removes a hold, stopping its timer.
func (b *Brake) take(uid types.UID) (*Hold, bool) {
	h, ok := b.held[uid]
	if !ok {
		return nil, false
	}
	h.timer.Stop()
	delete(b.held, uid)
	return h, true
}

// Thaw ends a hold: the pod runs again. ok is false when the pod was not held.
func (b *Brake) Thaw(uid types.UID) (Hold, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.take(uid)
	if !ok {
		return Hold{}, false, nil
	}
	if err := h.Cgroup.Thaw(); err != nil {
		return *h, true, fmt.Errorf("thaw pod %s: %w", h.Pod, err)
	}
	return *h, true, nil
}

// Kill ends a hold by killing every task of the pod (see PodCgroup.Kill),
// waiting up to timeout for them to be gone. ok is false when the pod was
// not held; nothing is killed then.
//
// The hold is ended at once; the wait runs without the Brake's lock, so
// freezing, thawing or listing other pods meanwhile does not wait for it.
func (b *Brake) Kill(uid types.UID, timeout time.Duration) (h Hold, killed int, ok bool, err error) {
	b.mu.Lock()
	held, ok := b.take(uid)
	b.mu.Unlock()
	if !ok {
		return Hold{}, 0, false, nil
	}
	killed, err = held.Cgroup.Kill(timeout)
	if err != nil {
		err = fmt.Errorf("kill pod %s: %w", held.Pod, err)
	}
	return *held, killed, true, err
}

// Held lists the holds, oldest first.
func (b *Brake) Held() []Hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Hold, 0, len(b.held))
	for _, h := range b.held {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FrozenAt.Before(out[j].FrozenAt) })
	return out
}

// ThawAll ends every hold (the agent stopping, the brake switched off).
func (b *Brake) ThawAll() []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for uid := range b.held {
		h, _ := b.take(uid)
		if err := h.Cgroup.Thaw(); err != nil {
			errs = append(errs, fmt.Errorf("thaw pod %s: %w", h.Pod, err))
		}
	}
	return errs
}
