package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Reachability records whether the API server answered recently, from every
// request the agent makes anyway (watches, patches, evictions), so /readyz
// costs the API server a request only when the agent has been quiet and has
// no watch open: on a fleet, a /readyz request per node per probe period adds
// up.
type Reachability struct {
	mu       sync.Mutex
	lastOK   time.Time
	lastErr  error
	lastFail time.Time
	// openWatches counts watch streams being read; one that ends in an error
	// counts as a failure (client-go's HTTP/2 health check ends a stream on a
	// dead connection within about 45 s).
	openWatches int
}

// Wrap is a rest.Config WrapTransport: every request through it counts.
func (r *Reachability) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || resp.StatusCode >= 500 {
			r.fail(err, req, resp)
			return resp, err
		}
		r.lastOK = time.Now()
		if resp.StatusCode < 300 && req.URL.Query().Get("watch") == "true" {
			r.openWatches++
			resp.Body = &watchBody{ReadCloser: resp.Body, r: r}
		}
		return resp, err
	})
}

// fail records a failed request; r.mu must be held.
func (r *Reachability) fail(err error, req *http.Request, resp *http.Response) {
	r.lastFail = time.Now()
	if err != nil {
		r.lastErr = err
	} else {
		r.lastErr = fmt.Errorf("%s %s: HTTP %d", req.Method, req.URL.Path, resp.StatusCode)
	}
}

// watchBody ends its watch's count when the stream ends.
type watchBody struct {
	io.ReadCloser
	r    *Reachability
	once sync.Once
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end(err)
	}
	return n, err
}

func (b *watchBody) Close() error {
	b.end(nil)
	return b.ReadCloser.Close()
}

func (b *watchBody) end(err error) {
	b.once.Do(func() {
		b.r.mu.Lock()
		defer b.r.mu.Unlock()
		b.r.openWatches--
		// EOF is the server ending the watch (its timeout); cancellation is ours.
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
			b.r.lastFail, b.r.lastErr = time.Now(), fmt.Errorf("watch stream: %w", err)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Reachable: the last request the agent made got an answer.
func (r *Reachability) Reachable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.lastOK.IsZero() && r.lastOK.After(r.lastFail)
}

// Check (for /readyz) passes while the last request succeeded and either a
// watch stream is open or that request is less than 30 s old; otherwise it
// asks the API server's /readyz itself.
func (r *Reachability) Check(ctx context.Context, client Interface) error {
	r.mu.Lock()
	ok, fail, lastErr, watches := r.lastOK, r.lastFail, r.lastErr, r.openWatches
	r.mu.Unlock()
	if !ok.IsZero() && ok.After(fail) && (watches > 0 || time.Since(ok) < 30*time.Second) {
		return nil
	}
	if !fail.IsZero() && fail.After(ok) && time.Since(fail) < 5*time.Second {
		return fmt.Errorf("API server unreachable: %v", lastErr)
	}
	if err := client.RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		return fmt.Errorf("API server unreachable: %w", err)
	}
	return nil
}
