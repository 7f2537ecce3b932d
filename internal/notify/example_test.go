package notify_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/evictiond/evictiond/internal/notify"
	"github.com/evictiond/evictiond/internal/policy"
)

// The daemon's wiring: one decision loop woken by its ticker or by the fast
// path, reading fresh numbers on every pass. With internal/agent, pass
// waker.C() as agent.Options.Wake.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	var cfg *policy.Config // from policy.Load / the config file loader
	readMemory := func() (policy.Observations, error) {
		return nil, nil // the monitor's direct cgroupfs reader of the memory signals
	}

	opts := notify.Options{}
	if cfg != nil {
		opts = notify.OptionsFromConfig(cfg)
	}
	opts.ReadMemory = readMemory
	opts.Metrics = notify.NewMetrics() // register opts.Metrics.Collectors() on /metrics
	waker := notify.NewWaker()
	fastPath, err := notify.New(opts, waker)
	if err != nil {
		slog.Error("invalid notifier options", "err", err)
		return
	}
	go fastPath.Run(ctx)

	// On a configuration reload (agent.Options.OnConfig):
	onConfig := func(cfg *policy.Config) {
		if err := fastPath.Reconfigure(notify.OptionsFromConfig(cfg)); err != nil {
			slog.Error("notifier settings rejected; the running ones stay", "err", err)
		}
	}
	_ = onConfig

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-ticker.C:
		case <-waker.C():
			wake := waker.Take()
			slog.Debug("woken by the fast path", "sources", wake.Sources, "latency", time.Since(wake.First))
		}
		// pass(): refresh signals, evaluate, reclaim, evict at most one pod...
		fastPath.Rearm() // after a pass that changed memory use
	}
}
