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
	s := m.current()
	for _, t := range s.Thresholds {
		if s.MemcgThresholds && t.memory() {
			m.fallBack(SourceMemcg, t.name(), ReasonUnsupported, err)
		}
	}
	if s.PSI.Enabled {
		m.fallBack(SourcePSI, "memory", ReasonUnsupported, err)
	}
	if s.MemoryEvents {
		m.fallBack(SourceMemoryEvents, "kubepods", ReasonUnsupported, err)
	}
	m.markArmed()
	<-ctx.Done()
}
