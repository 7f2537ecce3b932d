package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/daemon"
)

func init() { commands["run"] = runRun }

// runFlags are the daemon's command line; everything else is in the config file.
type runFlags struct {
	daemon.ProcessOptions
	debug bool
}

func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &runFlags{}
	fs.StringVar(&f.ConfigPath, "config", "/etc/evictiond/config.yaml", "EvictionConfiguration file (a mounted ConfigMap); reloaded on change")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&f.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	fs.StringVar(&f.SelfUID, "pod-uid", os.Getenv("POD_UID"), "evictiond's own pod UID, never evicted (default $POD_UID)")
	f.Serving.AddFlags(fs)
	f.Node.AddFlags(fs)
	fs.BoolVar(&f.DryRun, "dry-run", false, "decide and report (logs, Events, metrics) without evicting, reclaiming or writing node status; overrides dryRun in the config")
	fs.StringVar(&f.RecordTrace, "record-trace", "", "write the node's readings and the loop's decisions to this file, for `evictiond simulate --trace` (docs/simulate.md); off when empty")
	fs.Int64Var(&f.RecordTraceMaxBytes, "record-trace-max-bytes", daemon.DefaultTraceMaxBytes, "stop recording the trace past this size")
	fs.BoolVar(&f.debug, "debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if f.NodeName == "" {
		return nil, errors.New("--node-name: value \"\": required (or $NODE_NAME)")
	}
	if err := f.Serving.Validate(); err != nil {
		return nil, err
	}
	if err := f.Node.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

func runRun(args []string, stdout, stderr io.Writer) int {
	f, err := parseRunFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "evictiond run: %v\n", err)
		return 2
	}
	level := slog.LevelInfo
	if f.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", f.NodeName)
	slog.SetDefault(log)
	klog.SetSlogLogger(log) // client-go and cAdvisor log through klog

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runDaemon(ctx, f, log); err != nil {
		log.Error("evictiond stopped", "err", err)
		return 1
	}
	log.Info("evictiond stopped")
	return 0
}

// runDaemon runs the daemon's process until ctx ends.
func runDaemon(ctx context.Context, f *runFlags, log *slog.Logger) error {
	o := f.ProcessOptions
	o.Logger = log
	return daemon.RunProcess(ctx, o)
}
