// Command vmprobe runs in a test VM (internal/testenv/vm.Node) and runs the
// commands the host's test sends it: POST /exec with a JSON ExecRequest
// ({"argv": [...], "stdin": "...", "timeout": seconds}) answers
// {"exit": N, "output": "..."} (stdout and stderr combined, at most 4 MiB).
// POST /sample {"dir": cgroup dir, "interval": seconds} starts sampling that
// cgroup's memory (memory.current, memory.max and inactive_file of memory.stat)
// from inside the guest, with the guest's clock; DELETE /sample stops it and
// answers the samples as JSON lines. It exists only inside the test VM, reached through a port qemu forwards
// from the host's loopback; it is never part of evictiond.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

type request struct {
	Argv    []string `json:"argv"`
	Stdin   string   `json:"stdin,omitempty"`
	Timeout float64  `json:"timeout,omitempty"`
}

type result struct {
	Exit   int    `json:"exit"`
	Output string `json:"output"`
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// Sample is one reading of a cgroup's memory, at the guest's UnixNano time.
type Sample struct {
	At           int64 `json:"at"`
	Current      int64 `json:"current"`
	Max          int64 `json:"max"`
	InactiveFile int64 `json:"inactiveFile"`
}

type sampler struct {
	mu      sync.Mutex
	stop    chan struct{}
	done    chan struct{}
	samples []Sample
}

func (s *sampler) start(dir string, interval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	s.stop, s.done, s.samples = make(chan struct{}), make(chan struct{}), nil
	stop, done := s.stop, s.done
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			smp := Sample{At: time.Now().UnixNano(), Current: readInt(dir + "/memory.current"), Max: readInt(dir + "/memory.max")}
			if stat, err := os.ReadFile(dir + "/memory.stat"); err == nil {
				for _, l := range strings.Split(string(stat), "\n") {
					if v, ok := strings.CutPrefix(l, "inactive_file "); ok {
						smp.InactiveFile, _ = strconv.ParseInt(v, 10, 64)
					}
				}
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (s *sampler) finish() []Sample {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1 // "max"
	}
	return v
}

func main() {
	listen := flag.String("listen", ":9999", "address to listen on")
	flag.Parse()
	http.HandleFunc("/exec", func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Argv) == 0 {
			http.Error(w, "want a JSON body with a non-empty argv", http.StatusBadRequest)
			return
		}
		timeout := time.Duration(req.Timeout * float64(time.Second))
		if timeout <= 0 {
			timeout = 2 * time.Minute
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
		out := &limitedBuffer{max: 4 << 20}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Stdin = strings.NewReader(req.Stdin)
		err := cmd.Run()
		res := result{Output: out.String()}
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			res.Exit = exit.ExitCode()
			if res.Exit < 0 {
				res.Exit = 128 // killed by a signal (the timeout)
			}
		default:
			res.Exit, res.Output = 127, err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	var smp sampler
	http.HandleFunc("/sample", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			var req struct {
				Dir      string  `json:"dir"`
				Interval float64 `json:"interval"`
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Dir == "" || req.Interval <= 0 {
				http.Error(w, "want a JSON body with dir and interval > 0", http.StatusBadRequest)
				return
			}
			smp.start(req.Dir, time.Duration(req.Interval*float64(time.Second)))
		case http.MethodDelete:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(smp.finish())
		default:
			http.Error(w, "POST or DELETE", http.StatusMethodNotAllowed)
		}
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
