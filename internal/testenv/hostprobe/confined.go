package hostprobe

import (
	"fmt"
	"strings"

	"github.com/evictiond/evictiond/internal/confine"
)

// AgentThreadsScript is a shell script, for the node's own shell (the host in the e2e tier, the
// guest in the node tier), that prints the status of every thread of the `evictiond run`
// process in the cgroup of the pod with this UID: "== <status path>", then its lines.
func AgentThreadsScript(podUID string) string {
	return forAgentProcess(podUID, `for s in $p/task/*/status; do echo "== $s"; cat $s; done`)
}

// AgentAppArmorScript is a shell script like AgentThreadsScript that prints, for every thread
// of the agent, "<attr path> <AppArmor label>" (/proc/<pid>/task/<tid>/attr/current).
func AgentAppArmorScript(podUID string) string {
	return forAgentProcess(podUID, `for a in $p/task/*/attr/current; do echo "$a $(cat $a)"; done`)
}

// forAgentProcess runs body with $p set to /proc/<pid> of each `evictiond run` process in the
// cgroup of the pod with this UID.
func forAgentProcess(podUID, body string) string {
	return fmt.Sprintf(`for p in /proc/[0-9]*; do
	grep -qE 'pod(%s|%s)' $p/cgroup 2>/dev/null || continue
	case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *evictiond\ run*) ;; *) continue ;; esac
	%s
done`, podUID, strings.ReplaceAll(podUID, "-", "_"), body)
}

// AppArmorFailures checks AgentAppArmorScript's output: every thread of the agent (a Go
// process has several) confined by profile in enforce mode.
func AppArmorFailures(out, profile string) []string {
	want := profile + " (enforce)"
	var failures []string
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		failures = append(failures, fmt.Sprintf("%d thread(s) of the agent seen, want a Go process's several:\n%s", len(lines), out))
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " "+want) {
			failures = append(failures, fmt.Sprintf("%s, want %s", l, want))
		}
	}
	return failures
}

// AgentThreads parses AgentThreadsScript's output.
func AgentThreads(out string) ([]confine.ThreadStatus, error) {
	var threads []confine.ThreadStatus
	for _, block := range strings.Split(out, "== ")[1:] {
		path, status, _ := strings.Cut(block, "\n")
		st, err := confine.ParseStatus(status)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		fmt.Sscanf(path[strings.Index(path, "/task/")+len("/task/"):], "%d", &st.TID)
		threads = append(threads, st)
	}
	if len(threads) == 0 {
		return nil, fmt.Errorf("no thread of an `evictiond run` process in the pod's cgroup:\n%s", out)
	}
	return threads, nil
}

// ConfinementFailures checks the agent's threads against what it does to itself at start
// (internal/confine): every thread in seccomp filter mode with no_new_privs and exactly one
// filter more than a container with the same security context has (baseline, from the
// probe); CAP_KILL absent from every thread's effective, permitted and inheritable sets when
// capKillDropped (cgroup v2), present in each otherwise (cgroup v1: the brake needs kill(2)).
// A Go process has several threads: fewer than two fails too (the proof is about all of them).
func ConfinementFailures(threads []confine.ThreadStatus, baseline int, capKillDropped bool) []string {
	var out []string
	if len(threads) < 2 {
		out = append(out, fmt.Sprintf("%d thread(s) of the agent seen, want a Go process's several", len(threads)))
	}
	for _, th := range threads {
		if th.Seccomp != 2 || !th.NoNewPrivs || th.SeccompFilters != baseline+1 {
			out = append(out, fmt.Sprintf("thread %d: Seccomp %d, NoNewPrivs %t, Seccomp_filters %d; want 2, true and %d (RuntimeDefault's %d + the agent's own)",
				th.TID, th.Seccomp, th.NoNewPrivs, th.SeccompFilters, baseline+1, baseline))
		}
		if th.HoldsCapKill() == capKillDropped {
			out = append(out, fmt.Sprintf("thread %d: CAP_KILL held %t, want %t (CapEff %016x CapPrm %016x CapInh %016x)",
				th.TID, th.HoldsCapKill(), !capKillDropped, th.CapEff, th.CapPrm, th.CapInh))
		}
	}
	return out
}

// LogHasLine says whether one line of log holds every part.
func LogHasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// CheckConfinement reads AgentThreadsScript's output against the probe's seccomp filters and
// returns a summary for the test's log and the failures (ConfinementFailures), or an error
// when either cannot be read. RuntimeDefault must be in force on the probe (1 filter or more).
func CheckConfinement(probe Result, threadsOut string, capKillDropped bool) (string, []string, error) {
	baseline, err := probe.SeccompFilters()
	if err != nil {
		return "", nil, err
	}
	if baseline < 1 {
		return "", nil, fmt.Errorf("the probe, with the agent's security context, ran under %d seccomp filters: RuntimeDefault is not in force", baseline)
	}
	threads, err := AgentThreads(threadsOut)
	if err != nil {
		return "", nil, err
	}
	summary := fmt.Sprintf("%d threads of the agent; the first has %d seccomp filters (the probe, RuntimeDefault: %d) and CapEff %016x",
		len(threads), threads[0].SeccompFilters, baseline, threads[0].CapEff)
	return summary, ConfinementFailures(threads, baseline, capKillDropped), nil
}
