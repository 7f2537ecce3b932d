// Package hostprobe tries, from inside the running agent's pod, the host writes the agent
// must not be able to make (docs/security.md), for the e2e and node tiers: an ephemeral
// container with the agent container's security context and volume mounts runs a busybox
// script, whose report comes back as the container's termination message.
package hostprobe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/evictiond/evictiond/internal/testenv/images"
)

// Refused are the paths that must not open for writing; Writable those the agent writes.
var (
	Refused = []string{"/host/proc/sys/kernel/core_pattern", "/host/proc/sysrq-trigger", "/host/proc/sys/vm/drop_caches",
		"/host/sys/power/state", "/host/sys/kernel/mm/transparent_hugepage/enabled", "/host/etc/evictiond-probe"}
	Writable = []string{"/proc/pressure/memory"}
)

// script opens each path for writing without writing a byte (`: >`: a refused open fails
// with the mount's error; an accepted one truncates nothing on procfs or sysfs) and prints one
// line per path: "refused" only for a read-only file system, "ABSENT" for a path that does not
// exist (a kernel without it), "WRITABLE" or "OTHER" otherwise.
func script() string {
	return fmt.Sprintf(`
report() {
for p in %s; do
	case $p in /host/etc/*) ;; *) [ -e "$p" ] || { echo "ABSENT $p"; continue; } ;; esac
	if out=$( (: > "$p") 2>&1 ); then echo "WRITABLE $p"
	else case $out in *"Read-only file system"*) echo "refused $p" ;; *) echo "OTHER $p: $out" ;; esac; fi
done
for p in %s; do
	if out=$( (: > "$p") 2>&1 ); then echo "writable $p"; else echo "REFUSED $p: $out"; fi
done
if [ -w /host/sys/fs/cgroup ]; then echo "writable /host/sys/fs/cgroup"; else echo "REFUSED /host/sys/fs/cgroup"; fi
echo "self $(grep '^Seccomp_filters:' /proc/self/status)"
echo "self apparmor $(cat /proc/self/attr/current 2>&1)"
if out=$(kill -CONT 1 2>&1); then echo "signal init: sent"; else echo "signal init: $out"; fi
}
report > /dev/termination-log 2>&1
`, strings.Join(Refused, " "), strings.Join(Writable, " "))
}

// Result is the probe's report, one line per path.
type Result struct {
	Lines []string
}

// Failures are the lines that break the rule; absent paths are reported by Absent.
func (r Result) Failures() []string {
	var out []string
	for _, l := range r.Lines {
		if strings.HasPrefix(l, "WRITABLE") || strings.HasPrefix(l, "REFUSED") || strings.HasPrefix(l, "OTHER") {
			out = append(out, l)
		}
	}
	return out
}

// SeccompFilters is how many seccomp filters the probe ran under: the agent container's
// security context (RuntimeDefault) without the filter the agent adds to itself.
func (r Result) SeccompFilters() (int, error) {
	for _, l := range r.Lines {
		if v, ok := strings.CutPrefix(l, "self Seccomp_filters:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("the probe's report has no Seccomp_filters line (a kernel before 5.9?): %q", r.Lines)
}

// AppArmorLabel is the probe's own AppArmor label (/proc/self/attr/current): the profile and
// its mode where AppArmor is on ("cri-containerd.apparmor.d (enforce)"), the read's error or
// "unconfined" elsewhere.
func (r Result) AppArmorLabel() string {
	for _, l := range r.Lines {
		if v, ok := strings.CutPrefix(l, "self apparmor "); ok {
			return v
		}
	}
	return ""
}

// SignalInit is what the probe's kill(1, SIGCONT) gave: "sent", or busybox's error. SIGCONT
// does nothing to a running PID 1; uid 0 may send it to a root process without CAP_KILL,
// RuntimeDefault seccomp allows kill(2), and no mount is involved: only an LSM can refuse it
// (AppArmor: the runtime's default profile lets a container signal only processes under the
// same profile; its base abstraction allows the existence test, kill -0, to anyone).
func (r Result) SignalInit() string {
	for _, l := range r.Lines {
		if v, ok := strings.CutPrefix(l, "signal init: "); ok {
			return v
		}
	}
	return ""
}

// Absent are the paths this kernel does not have.
func (r Result) Absent() []string {
	var out []string
	for _, l := range r.Lines {
		if p, ok := strings.CutPrefix(l, "ABSENT "); ok {
			out = append(out, p)
		}
	}
	return out
}

// Run adds the probe to pod as ephemeral container name, next to container, and returns its
// report. The pause image of the test clusters is busybox.
func Run(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, container, name string) (Result, error) {
	return run(ctx, client, pod, container, name, nil)
}

// RunWithAppArmor is Run with the probe's AppArmor profile set to profile, the rest of the
// agent container's security context unchanged: the control that shows which refusals are
// AppArmor's alone.
func RunWithAppArmor(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, container, name string, profile corev1.AppArmorProfile) (Result, error) {
	return run(ctx, client, pod, container, name, &profile)
}

func run(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, container, name string, appArmor *corev1.AppArmorProfile) (Result, error) {
	var target *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			target = &pod.Spec.Containers[i]
		}
	}
	if target == nil {
		return Result{}, fmt.Errorf("pod %s has no container %s", pod.Name, container)
	}
	var mounts []corev1.VolumeMount
	for _, m := range target.VolumeMounts {
		if !strings.HasPrefix(m.Name, "kube-api-access") { // the token: not the probe's business
			mounts = append(mounts, m)
		}
	}
	sc := target.SecurityContext
	if appArmor != nil {
		sc = sc.DeepCopy()
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		sc.AppArmorProfile = appArmor
	}
	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name:            name,
			Image:           images.PauseRef,
			ImagePullPolicy: corev1.PullNever,
			Command:         []string{images.BusyboxPath, "sh", "-c", script()},
			SecurityContext: sc,
			VolumeMounts:    mounts,
		},
		TargetContainerName: container,
	})
	if _, err := client.CoreV1().Pods(pod.Namespace).UpdateEphemeralContainers(ctx, pod.Name, pod, metav1.UpdateOptions{}); err != nil {
		return Result{}, fmt.Errorf("adding the probe to pod %s: %w", pod.Name, err)
	}
	var term *corev1.ContainerStateTerminated
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.EphemeralContainerStatuses {
			if s.Name == name {
				last = fmt.Sprintf("%+v", s.State)
				term = s.State.Terminated
			}
		}
		return term != nil, nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("the probe did not finish: %w (state %s)", err, last)
	}
	if term.ExitCode != 0 || term.Message == "" {
		return Result{}, fmt.Errorf("the probe exited %d (%s) with report %q", term.ExitCode, term.Reason, term.Message)
	}
	return Result{Lines: strings.Split(strings.TrimSpace(term.Message), "\n")}, nil
}
