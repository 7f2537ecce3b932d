package notify

import "github.com/evictiond/evictiond/internal/policy"

// OptionsFromConfig maps a compiled configuration onto Options: the notifier
// switches and the memory.available / allocatableMemory.available,
// pid.available and nodefs.available thresholds (hard and soft; PSI, inode and
// the CRI-read imagefs/containerfs thresholds are not the fast path's), and
// a poll for the brake's rates when the brake is on. Paths,
// the reader, logger and metrics are the daemon's to fill in.
//
// A signal with two thresholds of the same kind (an explicit
// allocatableMemory.available one next to one derived from memory.available)
// is watched at the higher one, which is crossed first.
func OptionsFromConfig(cfg *policy.Config) Options {
	n := cfg.Notifier
	opts := Options{
		MemcgThresholds: n.MemcgThresholds,
		MemoryEvents:    n.MemoryEvents,
		PSI: PSIOptions{
			Enabled: n.PSIEnabled,
			Type:    PSIStallType(n.PSIType),
			Stall:   n.PSIStall,
			Window:  n.PSIWindow,
		},
		PollInterval:     n.PollInterval,
		PollIdleInterval: n.PollIdleInterval,
		PollForRates:     cfg.Brake.Enabled,
	}
	index := map[string]int{}
	for _, pt := range cfg.Thresholds {
		switch pt.Signal {
		case policy.SignalMemoryAvailable, policy.SignalAllocatableMemoryAvailable, policy.SignalPIDAvailable, policy.SignalNodeFsAvailable:
		default:
			continue
		}
		t := Threshold{Signal: pt.Signal, Hard: pt.Hard()}
		if pt.Value.Quantity != nil {
			t.Available = pt.Value.Quantity.Value()
		}
		if !pt.Value.IsQuantity() {
			t.Percentage = float64(pt.Value.Percentage)
		}
		t.Bound = pt.Value.Bound
		if i, dup := index[t.name()]; dup {
			if higherThan(t, opts.Thresholds[i]) {
				opts.Thresholds[i] = t
			}
			continue
		}
		index[t.name()] = len(opts.Thresholds)
		opts.Thresholds = append(opts.Thresholds, t)
	}
	return opts
}

// higherThan compares two thresholds of one signal; mixed forms (bytes and
// percentage) cannot be compared without the capacity, so the first stays.
func higherThan(a, b Threshold) bool {
	if a.Bound != "" || b.Bound != "" {
		return false
	}
	if a.Percentage > 0 && b.Percentage > 0 {
		return a.Percentage > b.Percentage
	}
	if a.Available > 0 && b.Available > 0 {
		return a.Available > b.Available
	}
	return false
}
