package notify

import (
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

func validOptions() Options {
	return Options{
		MemcgThresholds: true,
		PSI:             PSIOptions{Enabled: true},
		Thresholds: []Threshold{
			{Signal: policy.SignalMemoryAvailable, Hard: true, Available: 100 << 20},
			{Signal: policy.SignalMemoryAvailable, Hard: false, Percentage: 0.1},
			{Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 100 << 20},
		},
	}.withDefaults()
}

func TestDefaultsAreValid(t *testing.T) {
	o := validOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if o.PollInterval != 100*time.Millisecond || o.PSI.Window != 2*time.Second || o.PSI.Stall != 100*time.Millisecond || o.PSI.Type != PSISome {
		t.Fatalf("unexpected defaults: %+v", o)
	}
}

func TestValidateNamesFieldValueAndRule(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Options)
		want   []string
	}{
		{"poll too fast", func(o *Options) { o.PollInterval = time.Millisecond }, []string{"pollInterval=1ms", "10ms..10s"}},
		{"poll too slow", func(o *Options) { o.PollInterval = time.Minute }, []string{"pollInterval=1m0s"}},
		{"rearm too fast", func(o *Options) { o.RearmInterval = time.Millisecond }, []string{"rearmInterval=1ms", "100ms..1m0s"}},
		{"psi window short", func(o *Options) { o.PSI.Window = 100 * time.Millisecond }, []string{"psi.window=100ms", "500ms..10s"}},
		{"psi window long", func(o *Options) { o.PSI.Window = 20 * time.Second }, []string{"psi.window=20s"}},
		{"psi stall above window", func(o *Options) { o.PSI.Stall = 3 * time.Second }, []string{"psi.stall=3s", "<= psi.window (2s)"}},
		{"psi stall sub-microsecond", func(o *Options) { o.PSI.Stall = 1500 * time.Nanosecond }, []string{"psi.stall/psi.window", "whole microseconds"}},
		{"psi type", func(o *Options) { o.PSI.Type = "most" }, []string{"psi.type=most", `"some" or "full"`}},
		{"relative cgroup root", func(o *Options) { o.CgroupRoot = "sys/fs/cgroup" }, []string{"cgroupRoot=sys/fs/cgroup", "absolute"}},
		{"kubepods escapes", func(o *Options) { o.KubepodsCgroup = "../etc" }, []string{"kubepodsCgroup=../etc"}},
		{"kubepods absolute", func(o *Options) { o.KubepodsCgroup = "/kubepods" }, []string{"kubepodsCgroup=/kubepods"}},
		{"imagefs signal (read through the CRI: not polled)", func(o *Options) { o.Thresholds[0].Signal = policy.SignalImageFsAvailable }, []string{"thresholds[0].signal=imagefs.available", "must be memory.available, allocatableMemory.available, pid.available or nodefs.available"}},
		{"both forms", func(o *Options) { o.Thresholds[0].Percentage = 0.5 }, []string{"thresholds[0]=available=104857600 percentage=0.5", "exactly one"}},
		{"negative bytes", func(o *Options) { o.Thresholds[0].Available = -1 }, []string{"thresholds[0].available=-1"}},
		{"percentage 100", func(o *Options) { o.Thresholds[1].Percentage = 1 }, []string{"thresholds[1].percentage=1", "(0, 1)"}},
		{"zero threshold", func(o *Options) { o.Thresholds[0].Available = 0 }, []string{"thresholds[0]=0", "never fires"}},
		{"duplicate", func(o *Options) { o.Thresholds[2].Signal = policy.SignalMemoryAvailable }, []string{"thresholds[2]=hard memory.available", "duplicates thresholds[0]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			tc.mutate(&o)
			err := o.Validate()
			if err == nil {
				t.Fatal("Validate accepted invalid options")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAdaptPSIWindowRoundsUpToTwoSecondMultipleAndKeepsStallRatio(t *testing.T) {
	cases := []struct {
		stall, window         time.Duration
		wantStall, wantWindow time.Duration
		wantAdapted           bool
	}{
		{100 * time.Millisecond, time.Second, 200 * time.Millisecond, 2 * time.Second, true},
		{150 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond, 2 * time.Second, true},
		{time.Second, 3 * time.Second, 1333333 * time.Microsecond, 4 * time.Second, true},
		{9 * time.Second, 9 * time.Second, 10 * time.Second, 10 * time.Second, true},
		{100 * time.Millisecond, 2 * time.Second, 100 * time.Millisecond, 2 * time.Second, false},
		{time.Second, 10 * time.Second, time.Second, 10 * time.Second, false},
	}
	for _, tc := range cases {
		stall, window, adapted := adaptPSIWindow(tc.stall, tc.window)
		if stall != tc.wantStall || window != tc.wantWindow || adapted != tc.wantAdapted {
			t.Errorf("adaptPSIWindow(%v, %v) = %v, %v, %v; want %v, %v, %v",
				tc.stall, tc.window, stall, window, adapted, tc.wantStall, tc.wantWindow, tc.wantAdapted)
		}
		if stall > window {
			t.Errorf("adaptPSIWindow(%v, %v): stall %v above window %v, the kernel would refuse it", tc.stall, tc.window, stall, window)
		}
	}
}

// A reload keeps what it does not change and takes what it does: the idle
// period, and the brake's poll for rates (a reload used to drop it, stopping
// the poll on a node whose every threshold has a kernel notifier).
func TestReconfigureCarriesTheIdlePeriodAndThePollForRates(t *testing.T) {
	ts := []Threshold{{Signal: policy.SignalMemoryAvailable, Hard: true, Available: 100 << 20}}
	m, err := New(Options{Thresholds: ts, PollForRates: true}, NewWaker())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.current(); got.PollIdle != DefaultPollIdleInterval || !got.PollForRates {
		t.Fatalf("after New: idle %v, poll for rates %v", got.PollIdle, got.PollForRates)
	}
	if err := m.Reconfigure(Options{Thresholds: ts, PollForRates: true, PollIdleInterval: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := m.current(); got.PollIdle != 3*time.Second || !got.PollForRates {
		t.Errorf("after a reload: idle %v, poll for rates %v; want 3s, true", got.PollIdle, got.PollForRates)
	}
	err = m.Reconfigure(Options{Thresholds: ts, PollInterval: 2 * time.Second, PollIdleInterval: time.Second})
	if err == nil || !strings.Contains(err.Error(), "pollIdleInterval=1s: must be within pollInterval (2s)..10s") {
		t.Errorf("idle period below the poll interval: %v", err)
	}
}
