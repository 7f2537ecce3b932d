package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/confine"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/version"
)

func init() { commands["run"] = runRun }

const runHelp = `Usage: evictiond run [flags]

The agent, as the DaemonSet runs it: watches the node's signals, decides,
reclaims and evicts; serves /metrics, /healthz and /readyz. Everything but
where things are is in the --config file (docs/configuration.md).

Environment:
  NODE_NAME   default of --node-name (the DaemonSet sets it from spec.nodeName)
  POD_UID     default of --pod-uid (the DaemonSet sets it from metadata.uid)
`

// runFlags are the daemon's command line; everything else is in the config file.
type runFlags struct {
	daemon.ProcessOptions
	log logFlags
	// requireConfinement stops the agent when a confinement that applies to
	// the node cannot be put in force.
	requireConfinement bool
}

// selfConfine confines the process (internal/confine); main sets it, so that
// tests running the command in their own process are not confined by it.
var selfConfine func(cgroupMount string) confine.Report

// parseRunFlags returns the flags, or the exit code when the command line
// does not run the agent (help: 0, usage error: 2, reported on stderr).
func parseRunFlags(args []string, stdout, stderr io.Writer) (*runFlags, int, bool) {
	fs := newFlagSet("run", runHelp, stdout, stderr)
	f := &runFlags{}
	fs.StringVar(&f.ConfigPath, "config", "/etc/evictiond/config.yaml", "EvictionConfiguration file (a mounted ConfigMap); reloaded on change")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&f.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	fs.StringVar(&f.SelfUID, "pod-uid", os.Getenv("POD_UID"), "evictiond's own pod UID, never evicted (default $POD_UID)")
	f.Serving.AddFlags(fs)
	f.Node.AddFlags(fs)
	fs.BoolVar(&f.DryRun, "dry-run", false, "decide and report (logs, Events, metrics) without evicting, reclaiming or writing node status; overrides dryRun in the config")
	fs.BoolVar(&f.LegacySignalMetrics, "legacy-signal-metrics", false, "also export evictiond_signal_available, evictiond_signal_capacity and evictiond_threshold, which mix units and are replaced by families of one unit (docs/metrics.md); deprecated, removed in the next release")
	fs.StringVar(&f.RecordTrace, "record-trace", "", "write the node's readings and the loop's decisions to this file, for `evictiond simulate --trace` (docs/simulate.md); off when empty")
	fs.Int64Var(&f.RecordTraceMaxBytes, "record-trace-max-bytes", daemon.DefaultTraceMaxBytes, "stop recording the trace past this size")
	fs.BoolVar(&f.requireConfinement, "require-confinement", false, "stop at start when the agent cannot confine itself (the seccomp filter refusing open_by_handle_at; CAP_KILL dropped on cgroup v2); by default it logs the failure, sets evictiond_confinement 0 and runs (docs/security.md)")
	f.log.addFlags(fs, "json")
	debug := fs.Bool("debug", false, "log at debug level (-v=4)")
	_ = fs.MarkDeprecated("debug", "use -v=4")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return nil, code, false
	}
	if *debug && f.log.verbosity < 4 {
		f.log.verbosity = 4
	}
	for _, check := range []func() error{
		func() error {
			if f.NodeName == "" {
				return errors.New("--node-name: value \"\": required (or $NODE_NAME)")
			}
			return nil
		},
		f.log.validate, f.Serving.Validate, f.Node.Validate,
	} {
		if err := check(); err != nil {
			return nil, usageError(fs, stderr, err), false
		}
	}
	return f, 0, true
}

func runRun(args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseRunFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	log := f.log.logger(stderr, slog.LevelInfo).With("node", f.NodeName)
	slog.SetDefault(log)
	klog.SetSlogLogger(log) // client-go and cAdvisor log through klog
	v := version.Get()
	log.Info("evictiond starting", "version", v.Version, "revision", v.Revision, "goVersion", v.GoVersion, "config", f.ConfigPath)
	// Before any input is read: configuration, API objects, node files.
	if selfConfine != nil {
		f.Confinement = selfConfine(f.Node.CgroupMount())
		if !logConfinement(log, f.Confinement) && f.requireConfinement {
			log.Error("evictiond stopped: --require-confinement and the agent could not confine itself", "err", f.Confinement.Err())
			return exitFailure
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runDaemon(ctx, f, log); err != nil {
		log.Error("evictiond stopped", "err", err)
		return exitFailure
	}
	log.Info("evictiond stopped")
	return exitOK
}

// runDaemon runs the daemon's process until ctx ends.
func runDaemon(ctx context.Context, f *runFlags, log *slog.Logger) error {
	o := f.ProcessOptions
	o.Logger = log
	return daemon.RunProcess(ctx, o)
}

// logConfinement logs each control's outcome, a failure at error level, and
// says whether every control that applies is in force.
func logConfinement(log *slog.Logger, r confine.Report) bool {
	for _, o := range r {
		switch {
		case o.Failed():
			log.Error("confinement failed: the agent runs without it", "control", string(o.Control), "err", o.Err)
		case o.Applied:
			log.Info("confinement applied", "control", string(o.Control), "detail", o.Detail)
		default:
			log.Info("confinement not applicable", "control", string(o.Control), "detail", o.Detail)
		}
	}
	return r.Err() == nil
}
