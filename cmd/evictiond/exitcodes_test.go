package main

import (
	"strings"
	"testing"
)

// Every subcommand: help exits 0 on stdout, a wrong command line 2 with the
// problem and a pointer to --help on stderr, an input that fails its checks 1
// (docs/operations.md).
func TestExitCodesOfEverySubcommand(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"run help", []string{"run", "--help"}, 0, "Usage: evictiond run", ""},
		{"run -h", []string{"run", "-h"}, 0, "--node-name", ""},
		{"run unknown flag", []string{"run", "--frobnicate"}, 2, "", "evictiond run: unknown flag: --frobnicate\nRun 'evictiond run --help' for usage."},
		{"run no node name", []string{"run"}, 2, "", `--node-name: value "": required (or $NODE_NAME)`},
		{"run bad log format", []string{"run", "--node-name=n", "--log-format=xml"}, 2, "", `--log-format: value "xml": must be json or text`},
		{"run bad verbosity", []string{"run", "--node-name=n", "-v=-1"}, 2, "", `-v: value -1: must be 0 or more`},
		{"observe help", []string{"observe", "--help"}, 0, "Usage: evictiond observe", ""},
		{"observe unknown flag", []string{"observe", "--frobnicate"}, 2, "", "evictiond observe: unknown flag: --frobnicate"},
		{"observe bad output", []string{"observe", "-o", "yaml"}, 2, "", `--output: value "yaml": must be json or table`},
		{"observe bad cgroup driver", []string{"observe", "--cgroup-driver", "docker"}, 2, "", `--cgroup-driver "docker"`},
		{"validate help", []string{"validate", "-h"}, 0, "Usage: evictiond validate", ""},
		{"validate no file", []string{"validate"}, 2, "", "-f/--config FILE is required"},
		{"validate unknown flag", []string{"validate", "-x"}, 2, "", "evictiond validate: unknown shorthand flag: 'x' in -x"},
		{"validate invalid", []string{"validate", "--config", "testdata/invalid.yaml"}, 1, "", "duplicate signal"},
		{"validate missing file", []string{"validate", "-f", "testdata/does-not-exist.yaml"}, 1, "", "no such file or directory"},
		{"simulate help", []string{"simulate", "--help"}, 0, "Usage: evictiond simulate", ""},
		{"simulate no file", []string{"simulate"}, 2, "", "one of -f/--file SCENARIO or --trace FILE is required"},
		{"simulate bad output", []string{"simulate", "-f", "../../examples/pid-pressure.yaml", "--output=yaml"}, 2, "", `--output: value "yaml": must be json or text`},
		{"simulate invalid", []string{"simulate", "-f", "testdata/invalid.yaml"}, 1, "", ""},
		{"version help", []string{"version", "--help"}, 0, "Usage: evictiond version", ""},
		{"probe help", []string{"probe", "--help"}, 0, "Usage: evictiond probe", ""},
		{"probe bad timeout", []string{"probe", "--timeout=soon"}, 2, "", "invalid argument \"soon\" for \"--timeout\""},
		{"version bad output", []string{"version", "-o", "yaml"}, 2, "", `--output: value "yaml"`},
		{"help", []string{"help"}, 0, "evictiond version [-o json]", ""},
		{"--help", []string{"--help"}, 0, "Exit codes:", ""},
		{"no command", nil, 2, "", "evictiond — node-pressure eviction"},
		{"unknown command", []string{"frobnicate"}, 2, "", `evictiond: unknown command "frobnicate"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout containing %q, stderr containing %q",
					tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
			if tc.code == 0 && stderr != "" {
				t.Errorf("%q: help wrote to stderr: %q", tc.args, stderr)
			}
		})
	}
}

func TestVersionAndDashDashVersionPrintTheBuild(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := run(args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "evictiond ") || !strings.Contains(stdout, "(revision ") {
			t.Errorf("%q: exit %d stdout %q stderr %q", args, code, stdout, stderr)
		}
	}
	code, stdout, _ := run("version", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"version":`) || !strings.Contains(stdout, `"goVersion":"go`) {
		t.Errorf("version -o json: exit %d %q", code, stdout)
	}
}
