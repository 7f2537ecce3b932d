//go:build e2e

package e2e_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// auditedRequest is one pod write seen in the API server's audit log.
type auditedRequest struct {
	Verb        string // "create" for an eviction, "delete" for a delete
	Subresource string // "eviction" or ""
	Namespace   string
	Name        string
	User        string
	Code        int // the response's HTTP status: 201 evicted, 429 refused by a PDB, ...
	At          time.Time
}

// auditEvent is one completed request in the API server's audit log.
type auditEvent struct {
	Verb      string
	User      struct{ Username string }
	UserAgent string
	ObjectRef struct {
		Resource, Subresource, Namespace, Name string
	}
	ResponseStatus  struct{ Code int }
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// forEachAuditEvent calls fn for each request on resource in the audit log, in order
// (ResponseComplete stage only).
func forEachAuditEvent(t *testing.T, auditPath, resource string, fn func(auditEvent)) {
	t.Helper()
	forEachLine(t, auditPath, func(line string) bool {
		if !strings.Contains(line, `"`+resource+`"`) {
			return true
		}
		var ev struct {
			auditEvent
			Stage string `json:"stage"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Stage == "ResponseComplete" && ev.ObjectRef.Resource == resource {
			fn(ev.auditEvent)
		}
		return true
	})
}

// auditedPodWrites returns the evictions and deletes of pods in namespace, in order, from
// the audit log.
func auditedPodWrites(t *testing.T, auditPath, namespace string) []auditedRequest {
	t.Helper()
	var out []auditedRequest
	forEachAuditEvent(t, auditPath, "pods", func(ev auditEvent) {
		if ev.ObjectRef.Namespace != namespace {
			return
		}
		isEviction := ev.Verb == "create" && ev.ObjectRef.Subresource == "eviction"
		isDelete := ev.Verb == "delete" && ev.ObjectRef.Subresource == ""
		if isEviction || isDelete {
			out = append(out, auditedRequest{Verb: ev.Verb, Subresource: ev.ObjectRef.Subresource, Namespace: namespace,
				Name: ev.ObjectRef.Name, User: ev.User.Username, Code: ev.ResponseStatus.Code, At: ev.RequestReceived})
		}
	})
	return out
}

// forEachLine calls fn for each line of the file until it returns false. Lines have no
// length limit (the kubelet logs whole pod specs on one line).
func forEachLine(t *testing.T, path string, fn func(string) bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadString('\n')
		if len(line) > 0 && !fn(strings.TrimSuffix(line, "\n")) {
			return
		}
		if err != nil {
			if err != io.EOF {
				t.Fatalf("reading %s: %v", path, err)
			}
			return
		}
	}
}
