package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// Exit codes of every subcommand (docs/operations.md).
const (
	exitOK      = 0 // done; help asked for
	exitFailure = 1 // the input was read and is wrong (validation), or the work failed
	exitUsage   = 2 // the command line is wrong
)

// newFlagSet is a subcommand's command line: GNU-style flags (--name=value,
// -x shorthands). help is its text before the flags; -h/--help prints both on
// stdout.
func newFlagSet(name, help string, stdout, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr) // deprecation notices
	fs.SortFlags = true
	fs.Usage = func() { fmt.Fprintf(stdout, "%s\nFlags:\n%s", help, fs.FlagUsages()) }
	return fs
}

// parseFlags parses args into fs. It returns ok, or the exit code: 0 for
// -h/--help, 2 for a usage error (reported on stderr with a pointer to --help).
func parseFlags(fs *pflag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(doubleDash(fs, args))
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK, false
	}
	if err != nil {
		return usageError(fs, stderr, err), false
	}
	return 0, true
}

// usageError reports a command line that cannot run and returns exitUsage.
func usageError(fs *pflag.FlagSet, stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "evictiond %s: %v\nRun 'evictiond %s --help' for usage.\n", fs.Name(), err, fs.Name())
	return exitUsage
}

// doubleDash accepts the Go flag package's single-dash long flags
// (-node-name=x) that scripts written for earlier releases pass: a
// single-dash argument naming a long flag of fs is read as --name.
// Shorthands (-o json, -v=4) are left alone.
func doubleDash(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			if name, _, _ := strings.Cut(a[1:], "="); len(name) > 1 && fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// logFlags are --log-format and -v of the commands that log (run, observe).
type logFlags struct {
	format    string
	verbosity int
}

func (l *logFlags) addFlags(fs *pflag.FlagSet, defaultFormat string) {
	fs.StringVar(&l.format, "log-format", defaultFormat, "log format: json (one object a line) or text (key=value)")
	fs.IntVarP(&l.verbosity, "v", "v", 0, "log verbosity: 0 info; 4 debug (every decision's inputs); N also shows client-go's klog V(N) lines")
}

func (l *logFlags) validate() error {
	if l.format != "json" && l.format != "text" {
		return fmt.Errorf("--log-format: value %q: must be json or text", l.format)
	}
	if l.verbosity < 0 {
		return fmt.Errorf("-v: value %d: must be 0 or more", l.verbosity)
	}
	return nil
}

// logger is the slog logger the flags ask for, writing to w; quiet is the
// least severe level logged at -v=0 (run: info; observe: warn, its output is
// the snapshot). -v=N logs down to level -N: slog's debug is -4, and klog's
// V(N) arrives through klog.SetSlogLogger at level -N, as in the kubelet.
func (l *logFlags) logger(w io.Writer, quiet slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: quiet}
	if l.verbosity > 0 {
		opts.Level = slog.LevelInfo - slog.Level(l.verbosity)
	}
	if l.format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
