// Command vmprobe runs in a test VM (internal/testenv/vm.Node) and runs the
// commands the host's test sends it: POST /exec with a JSON ExecRequest
// ({"argv": [...], "stdin": "...", "timeout": seconds}) answers
// {"exit": N, "output": "..."} (stdout and stderr combined, at most 4 MiB).
// It exists only inside the test VM, reached through a port qemu forwards
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
	"os/exec"
	"strings"
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
	log.Fatal(http.ListenAndServe(*listen, nil))
}
