//go:build !linux

package notify

import (
	"context"
	"errors"
)

// runKernel: no kernel notifiers outside Linux; every configured one falls
// back to the poll, visibly.
func (m *Manager) runKernel(ctx context.Context) {
	err := errors.New("kernel memory notifications are supported on Linux only")
	for _, t := range m.currentThresholds() {
		if m.opts.MemcgThresholds {
			m.fallBack(SourceMemcg, t.name(), ReasonUnsupported, err)
		}
	}
	if m.opts.PSI.Enabled {
		m.fallBack(SourcePSI, "memory", ReasonUnsupported, err)
	}
	if m.opts.MemoryEvents {
		m.fallBack(SourceMemoryEvents, "kubepods", ReasonUnsupported, err)
	}
	m.markArmed()
	<-ctx.Done()
}
