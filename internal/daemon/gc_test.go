package daemon

import (
	"runtime/debug"
	"testing"
)

func TestTuneGCSetsItsDefaultUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "200")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=200 in the environment the GC percent became %d; want it left alone", got)
	}
	t.Setenv("GOGC", "")
	tuneGC()
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("without GOGC the GC percent is %d, want %d", got, defaultGCPercent)
	}
}
