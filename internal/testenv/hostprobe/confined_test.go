package hostprobe

import (
	"strings"
	"testing"
)

func TestCheckConfinement(t *testing.T) {
	status := func(filters, capEff string) string {
		return "Name:\tevictiond\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t" + filters + "\nCapInh:\t0000000000000000\nCapPrm:\t" + capEff + "\nCapEff:\t" + capEff + "\nCapBnd:\t0000000001000024\n"
	}
	probe := Result{Lines: []string{"refused /host/proc/sysrq-trigger", "self Seccomp_filters:\t1"}}
	const v2 = "0000000001000004" // CAP_KILL (bit 5) dropped
	out := "== /proc/42/task/42/status\n" + status("2", v2) + "== /proc/42/task/43/status\n" + status("2", v2)
	summary, failures, err := CheckConfinement(probe, out, true)
	if err != nil || len(failures) != 0 || summary != "2 threads of the agent; the first has 2 seccomp filters (the probe, RuntimeDefault: 1) and CapEff 0000000001000004" {
		t.Errorf("a confined agent on v2: %q %q %v", summary, failures, err)
	}
	// A thread without the agent's filter, one still holding CAP_KILL: each named.
	out = "== /proc/42/task/42/status\n" + status("2", v2) + "== /proc/42/task/44/status\n" + status("1", "0000000001000024")
	_, failures, err = CheckConfinement(probe, out, true)
	if err != nil || len(failures) != 2 || !strings.Contains(failures[0], "thread 44: Seccomp 2, NoNewPrivs true, Seccomp_filters 1; want 2, true and 2") ||
		!strings.Contains(failures[1], "thread 44: CAP_KILL held true, want false") {
		t.Errorf("an unconfined thread: %q %v", failures, err)
	}
	if _, _, err := CheckConfinement(probe, "", true); err == nil {
		t.Error("no thread: no error")
	}
	if _, _, err := CheckConfinement(Result{Lines: []string{"self Seccomp_filters:\t0"}}, out, true); err == nil || !strings.Contains(err.Error(), "RuntimeDefault is not in force") {
		t.Errorf("an unconfined probe: %v", err)
	}
}

func TestAppArmorFailures(t *testing.T) {
	const profile = "cri-containerd.apparmor.d"
	confined := "/proc/42/task/42/attr/current cri-containerd.apparmor.d (enforce)\n/proc/42/task/43/attr/current cri-containerd.apparmor.d (enforce)\n"
	if f := AppArmorFailures(confined, profile); len(f) != 0 {
		t.Errorf("every thread in enforce mode: %q", f)
	}
	// A thread in complain mode, one unconfined: each named; one thread alone is not the proof.
	for out, want := range map[string][]string{
		"/proc/42/task/42/attr/current cri-containerd.apparmor.d (complain)\n/proc/42/task/43/attr/current unconfined": {
			"/proc/42/task/42/attr/current cri-containerd.apparmor.d (complain), want cri-containerd.apparmor.d (enforce)",
			"/proc/42/task/43/attr/current unconfined, want cri-containerd.apparmor.d (enforce)"},
		"/proc/42/task/42/attr/current cri-containerd.apparmor.d (enforce)": {"1 thread(s) of the agent seen"},
		"": {"1 thread(s) of the agent seen", ", want cri-containerd.apparmor.d (enforce)"},
	} {
		got := AppArmorFailures(out, profile)
		if len(got) != len(want) {
			t.Errorf("%q: %q, want %d failures", out, got, len(want))
			continue
		}
		for i := range want {
			if !strings.Contains(got[i], want[i]) {
				t.Errorf("%q: failure %d is %q, want it to contain %q", out, i, got[i], want[i])
			}
		}
	}
}

func TestResultAppArmorLines(t *testing.T) {
	r := Result{Lines: []string{"refused /host/proc/sysrq-trigger", "self Seccomp_filters:\t2",
		"self apparmor cri-containerd.apparmor.d (enforce)", "signal init: sh: can't kill pid 1: Permission denied"}}
	if got := r.AppArmorLabel(); got != "cri-containerd.apparmor.d (enforce)" {
		t.Errorf("AppArmorLabel = %q", got)
	}
	if got := r.SignalInit(); got != "sh: can't kill pid 1: Permission denied" {
		t.Errorf("SignalInit = %q", got)
	}
	if (Result{}).AppArmorLabel() != "" || (Result{}).SignalInit() != "" {
		t.Error("a report without the lines: not empty")
	}
}
