package kube

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// errAfterBody yields data, then err.
type errAfterBody struct {
	data string
	err  error
}

func (b *errAfterBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *errAfterBody) Close() error { return nil }

func watchRequest(t *testing.T) *http.Request {
	u, err := url.Parse("https://api/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Request{Method: http.MethodGet, URL: u}
}

func TestReachabilityOpenWatchKeepsReadyAndABrokenStreamFails(t *testing.T) {
	r := &Reachability{}
	broken := errors.New("connection reset by peer")
	rt := r.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: &errAfterBody{data: `{"type":"ADDED"}`, err: broken}}, nil
	}))
	resp, err := rt.RoundTrip(watchRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	// An hour later, the open watch alone proves the API server reachable:
	// check must not need to ask its /readyz (a nil client would panic).
	r.mu.Lock()
	r.lastOK = time.Now().Add(-time.Hour)
	r.mu.Unlock()
	if err := r.Check(context.Background(), nil); err != nil {
		t.Fatalf("check with an open watch: %v", err)
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, broken) {
		t.Fatalf("reading the stream: %v", err)
	}
	err = r.Check(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("check after the stream broke = %v, want the stream's error", err)
	}
	if r.Reachable() {
		t.Errorf("reachable after the stream broke")
	}
}

func TestReachabilityWatchEndedByTheServerIsNoFailure(t *testing.T) {
	r := &Reachability{}
	rt := r.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: &errAfterBody{err: io.EOF}}, nil
	}))
	resp, err := rt.RoundTrip(watchRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !r.Reachable() {
		t.Errorf("a watch ended by the server's timeout (EOF) made the API server unreachable")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.openWatches != 0 {
		t.Errorf("openWatches = %d after the stream ended and closed, want 0", r.openWatches)
	}
}
