package monitor

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

// meminfo is the part of /proc/meminfo the memory signals use, in bytes.
type meminfo struct {
	memTotal     int64
	memAvailable int64
	// swapTotal and swapFree are -1 on a kernel built without swap (no lines).
	swapTotal, swapFree int64
}

// Read here rather than through procfs.Meminfo, which parses every one of the
// file's ~55 fields into its own pointer: a third of the CPU of the fast read
// the notifier's poll makes 10 times a second (BenchmarkObserveFastRealHost).
func readMeminfo(files *nodefs.Files, procDir string) (meminfo, error) {
	path := filepath.Join(procDir, "meminfo")
	buf := nodefs.GetBuffer()
	defer nodefs.PutBuffer(buf)
	raw, err := files.ReadSmallFile(path, *buf)
	if err != nil {
		return meminfo{}, err
	}
	out := meminfo{memTotal: -1, memAvailable: -1, swapTotal: -1, swapFree: -1}
	for len(raw) > 0 && (out.memTotal < 0 || out.memAvailable < 0 || out.swapTotal < 0 || out.swapFree < 0) {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("MemTotal:")):
			dst = &out.memTotal
		case bytes.HasPrefix(line, []byte("MemAvailable:")):
			dst = &out.memAvailable
		case bytes.HasPrefix(line, []byte("SwapTotal:")):
			dst = &out.swapTotal
		case bytes.HasPrefix(line, []byte("SwapFree:")):
			dst = &out.swapFree
		default:
			continue
		}
		// "MemTotal:       24567112 kB"
		fields := bytes.Fields(line[bytes.IndexByte(line, ':')+1:])
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return meminfo{}, fmt.Errorf("reading %s: line %q is not \"<key>: <n> kB\"", path, line)
		}
		kib, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil || kib < 0 {
			return meminfo{}, fmt.Errorf("reading %s: line %q: not a size in kB", path, line)
		}
		*dst = kib << 10
	}
	if out.memTotal < 0 {
		return meminfo{}, fmt.Errorf("reading %s: no MemTotal", path)
	}
	return out, nil
}

// pidReading is pid.available's inputs: the kubelet's pidlimit.Stats.
type pidReading struct {
	maxPID  int64 // min(kernel.pid_max, kernel.threads-max)
	running int64 // tasks, threads included, from /proc/loadavg
}

// readPIDs reads what the kubelet's pidlimit_linux.go reads: MaxPID is the
// smaller of pid_max and threads-max (kubernetes#107111), and the running
// count is the fourth field of /proc/loadavg ("running/total"), which unlike
// sysinfo(2).procs does not truncate above 65538.
func readPIDs(files *nodefs.Files, procDir string) (pidReading, error) {
	var r pidReading
	pidMax, err := files.ReadInt64(filepath.Join(procDir, "sys/kernel/pid_max"))
	if err != nil {
		return r, err
	}
	threadsMax, err := files.ReadInt64(filepath.Join(procDir, "sys/kernel/threads-max"))
	if err != nil {
		return r, err
	}
	r.maxPID = min(pidMax, threadsMax)
	path := filepath.Join(procDir, "loadavg")
	buf := nodefs.GetBuffer()
	defer nodefs.PutBuffer(buf)
	raw, err := files.ReadSmallFile(path, *buf)
	if err != nil {
		return r, err
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 4 {
		return r, fmt.Errorf("reading %s: %q has %d fields, want at least 4", path, raw, len(fields))
	}
	_, total, ok := strings.Cut(fields[3], "/")
	if !ok {
		return r, fmt.Errorf("reading %s: fourth field %q is not running/total", path, fields[3])
	}
	if r.running, err = strconv.ParseInt(total, 10, 64); err != nil {
		return r, fmt.Errorf("reading %s: task count %q: %w", path, total, err)
	}
	return r, nil
}

// psiLine is one line of a pressure file, stall percentages as the kernel
// prints them.
type psiLine struct {
	avg10, avg60, avg300 float64
}

type psiReading struct {
	some, full *psiLine
}

// readProcPSI reads /proc/pressure/memory (the format of a cgroup's memory.pressure).
func readProcPSI(files *nodefs.Files, procDir string) (psiReading, error) {
	return readPSIFile(files, filepath.Join(procDir, "pressure", "memory"))
}

// readPSIFile reads a pressure file, /proc/pressure/memory or a cgroup v2
// <cgroup>/memory.pressure ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0").
func readPSIFile(files *nodefs.Files, path string) (psiReading, error) {
	buf := nodefs.GetBuffer()
	defer nodefs.PutBuffer(buf)
	raw, err := files.ReadSmallFile(path, *buf)
	if err != nil {
		return psiReading{}, err
	}
	return parsePSI(path, raw)
}

func parsePSI(path string, raw []byte) (psiReading, error) {
	var r psiReading
	// Line by line without a bufio.Scanner: its 4 KiB buffer per read was a
	// third of the fast poll's allocations.
	for rest := raw; len(rest) > 0; {
		var text []byte
		text, rest, _ = bytes.Cut(rest, []byte{'\n'})
		fields := strings.Fields(string(text))
		if len(fields) == 0 {
			continue
		}
		var line psiLine
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return r, fmt.Errorf("reading %s: field %q is not key=value", path, kv)
			}
			var dst *float64
			switch k {
			case "avg10":
				dst = &line.avg10
			case "avg60":
				dst = &line.avg60
			case "avg300":
				dst = &line.avg300
			default:
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 100 || math.IsNaN(f) {
				return r, fmt.Errorf("reading %s: %s=%q: not a stall percentage in [0, 100]", path, k, v)
			}
			*dst = f
		}
		switch fields[0] {
		case "some":
			r.some = &line
		case "full":
			r.full = &line
		}
	}
	if r.some == nil {
		return r, fmt.Errorf("reading %s: no \"some\" line", path)
	}
	return r, nil
}

// psiHeadroom expresses a stall percentage as policy.PSIScale headroom:
// Available = PSIScale - stall*100, clamped to [0, PSIScale].
func psiHeadroom(stallPercent float64) int64 {
	stall := int64(math.Round(stallPercent * 100))
	return max(0, min(policy.PSIScale, policy.PSIScale-stall))
}

// psiSignals names the six signals of one scope, in the order some/full x
// avg10/avg60/avg300.
type psiSignals [6]policy.Signal

var (
	nodePSISignals = psiSignals{
		policy.SignalMemoryPSISomeAvg10, policy.SignalMemoryPSISomeAvg60, policy.SignalMemoryPSISomeAvg300,
		policy.SignalMemoryPSIFullAvg10, policy.SignalMemoryPSIFullAvg60, policy.SignalMemoryPSIFullAvg300,
	}
	allocatablePSISignals = psiSignals{
		policy.SignalAllocatableMemoryPSISomeAvg10, policy.SignalAllocatableMemoryPSISomeAvg60, policy.SignalAllocatableMemoryPSISomeAvg300,
		policy.SignalAllocatableMemoryPSIFullAvg10, policy.SignalAllocatableMemoryPSIFullAvg60, policy.SignalAllocatableMemoryPSIFullAvg300,
	}
)

// values pairs each signal of a scope with its stall percentage; a missing
// "full" line (kernels before 5.x on some resources) leaves those out.
func (r psiReading) values(names psiSignals) map[policy.Signal]float64 {
	out := make(map[policy.Signal]float64, 6)
	if r.some != nil {
		out[names[0]], out[names[1]], out[names[2]] = r.some.avg10, r.some.avg60, r.some.avg300
	}
	if r.full != nil {
		out[names[3]], out[names[4]], out[names[5]] = r.full.avg10, r.full.avg60, r.full.avg300
	}
	return out
}
