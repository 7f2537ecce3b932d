package metricsserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

func TestFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       Flags
		wantErr string
	}{
		{"defaults", Flags{MetricsAddress: ":9809", HealthAddress: ":9810", Secure: true}, ""},
		{"mounted certificate", Flags{MetricsAddress: ":9809", HealthAddress: ":9810", Secure: true, CertFile: "c", KeyFile: "k"}, ""},
		{"plain, one port", Flags{MetricsAddress: ":9809", HealthAddress: ":9809"}, ""},
		{"secure, one port", Flags{MetricsAddress: ":9809", HealthAddress: ":9809", Secure: true}, `--health-address: value ":9809": must differ`},
		{"certificate without key", Flags{MetricsAddress: ":9809", HealthAddress: ":9810", Secure: true, CertFile: "c"}, "give both or neither"},
		{"certificate but plain", Flags{MetricsAddress: ":9809", HealthAddress: ":9810", CertFile: "c", KeyFile: "k"}, "needs --metrics-secure=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSelfSignedCertificateIsRenewedAfterTwoThirdsOfItsLifetime(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	s, err := newSelfSigned("node-a", 90*time.Hour, clock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Leaf.DNSNames; len(got) != 1 || got[0] != "node-a" {
		t.Errorf("DNS names %v, want [node-a]", got)
	}
	now = now.Add(59 * time.Hour)
	if same, _ := s.GetCertificate(nil); same != first {
		t.Fatalf("certificate replaced after 59 of 90 hours")
	}
	now = now.Add(2 * time.Hour)
	renewed, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if renewed == first || renewed.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatalf("certificate not renewed after 61 of 90 hours")
	}
	if again, _ := s.GetCertificate(nil); again != renewed {
		t.Errorf("certificate replaced again right after its renewal")
	}
}

// A plain configuration on two ports: each port answers only its own paths, so the
// probes' port never serves /metrics.
func TestEachAddressServesOnlyItsPaths(t *testing.T) {
	// Two spellings of loopback: equal addresses would share one listener.
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0"}})
	metrics, health := "http://"+s.MetricsAddr.String(), "http://"+s.HealthAddr.String()
	for _, tc := range []struct {
		url  string
		want int
	}{
		{metrics + "/metrics", 200},
		{metrics + "/healthz", 404},
		{metrics + "/readyz", 404},
		{health + "/healthz", 200},
		{health + "/readyz", 200},
		{health + "/metrics", 404},
	} {
		if got, _ := get(t, http.DefaultClient, tc.url, ""); got != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.url, got, tc.want)
		}
	}
}

// --metrics-secure=false with both addresses equal: one plain listener for all three paths
// (how the agent served before /metrics was secured).
func TestPlainOnOneAddressServesEverything(t *testing.T) {
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "127.0.0.1:0"}})
	if s.MetricsAddr.String() != s.HealthAddr.String() {
		t.Fatalf("metrics on %s, health on %s: want one listener", s.MetricsAddr, s.HealthAddr)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if got, _ := get(t, http.DefaultClient, "http://"+s.MetricsAddr.String()+path, ""); got != 200 {
			t.Errorf("GET %s: %d, want 200", path, got)
		}
	}
}

// A client that leaves its keep-alive connection open does not keep it in the agent
// forever: the server closes it after limits.IdleTimeout.
func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	defer func(l serverLimits) { limits = l }(limits)
	limits.IdleTimeout = 300 * time.Millisecond
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "127.0.0.1:0"}})
	conn, err := net.Dial("tcp", s.MetricsAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("GET /healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	n, err := conn.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %d bytes, err %v; want the server to close it (EOF)", n, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("idle connection closed after %v; want about the idle timeout (300ms)", took)
	}
}

// A mounted certificate (a Secret volume) is served, and its replacement is picked up
// without a restart.
func TestMountedCertificateIsReloadedWhenTheFilesChange(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair := func() *x509.Certificate {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("evictiond.example", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Each file replaced whole, as the kubelet updates a Secret volume.
		for file, data := range map[string][]byte{keyFile: keyPEM, certFile: certPEM} {
			if err := os.WriteFile(file+".new", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(file+".new", file); err != nil {
				t.Fatal(err)
			}
		}
		certs, err := certutil.ParseCertsPEM(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		return certs[0]
	}
	defer func(d time.Duration) { certReloadInterval = d }(certReloadInterval)
	certReloadInterval = 200 * time.Millisecond
	first := writePair()
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0", Secure: true, CertFile: certFile, KeyFile: keyFile},
		Client: emptyAPI()})
	if got := servedSerial(t, s.MetricsAddr.String()); got != first.SerialNumber.String() {
		t.Fatalf("served certificate serial %s, want the mounted one %s", got, first.SerialNumber)
	}
	second := writePair()
	deadline := time.Now().Add(time.Minute)
	for servedSerial(t, s.MetricsAddr.String()) != second.SerialNumber.String() {
		if time.Now().After(deadline) {
			t.Fatalf("the replaced certificate (serial %s) was not served within a minute", second.SerialNumber)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStartRefusesABadMountedCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, f := range []string{certFile, keyFile} {
		if err := os.WriteFile(f, []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Start(context.Background(), Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0", Secure: true, CertFile: certFile, KeyFile: keyFile},
		Client: emptyAPI(), Handler: http.NotFoundHandler(), Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "--tls-cert-file "+certFile) {
		t.Fatalf("Start with a certificate that is not PEM: %v, want an error naming --tls-cert-file", err)
	}
}

func start(t *testing.T, o Options) *Server {
	t.Helper()
	if o.Handler == nil {
		o.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) })
	}
	o.Log = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Shutdown(context.Background()) })
	return s
}

// get fetches url, with a bearer token when token is set, and returns the status and body.
func get(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func servedSerial(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// A client that sends its request headers slowly (slowloris) is cut off after
// ReadHeaderTimeout instead of holding a connection and a goroutine.
func TestSlowRequestHeadersAreCutOff(t *testing.T) {
	defer func(l serverLimits) { limits = l }(limits)
	limits.ReadHeaderTimeout, limits.ReadTimeout = 200*time.Millisecond, 200*time.Millisecond
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0"}})
	for _, addr := range []string{s.MetricsAddr.String(), s.HealthAddr.String()} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil { // never ends the headers
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		began := time.Now()
		_, err = io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: a client stuck in its headers kept its connection for 5 s; want it closed after the 200ms ReadHeaderTimeout", addr)
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("%s: connection closed after %v, want about 200ms", addr, took)
		}
	}
}

// A response that takes longer than WriteTimeout is not delivered: the connection is
// closed, so a stuck handler cannot keep a client (and its connection) forever.
func TestResponseSlowerThanWriteTimeoutIsCutOff(t *testing.T) {
	defer func(l serverLimits) { limits = l }(limits)
	limits.WriteTimeout = 200 * time.Millisecond
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "late")
	})
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0"}, Handler: slow})
	resp, err := http.Get("http://" + s.MetricsAddr.String() + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("a handler slower than WriteTimeout: HTTP %d %q delivered, want the connection closed", resp.StatusCode, body)
	}
}

func TestOversizedRequestHeadersAreRefused(t *testing.T) {
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0"}})
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.HealthAddr.String()+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("a", limits.MaxHeaderBytes+8<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%d bytes of headers: HTTP %d, want 431", limits.MaxHeaderBytes+8<<10, resp.StatusCode)
	}
	if code, _ := get(t, http.DefaultClient, req.URL.String(), strings.Repeat("a", 4<<10)); code != 200 { // an OIDC token
		t.Fatalf("a 4 KiB token: HTTP %d, want 200", code)
	}
}

// Requests beyond the in-flight bound are refused at once with 429; once one ends,
// the next is served.
func TestRequestsBeyondTheInFlightBoundAreRefused(t *testing.T) {
	defer func(l serverLimits) { limits = l }(limits)
	limits.MetricsInFlight = 2
	entered, release := make(chan struct{}, 8), make(chan struct{})
	blocking := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0"}, Handler: blocking})
	url := "http://" + s.MetricsAddr.String() + "/metrics"
	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(url)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	<-entered
	<-entered
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third request while 2 are in flight: HTTP %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, _ := get(t, http.DefaultClient, "http://"+s.HealthAddr.String()+"/healthz", ""); code != 200 {
		t.Errorf("/healthz while /metrics is full: %d, want 200 (each listener has its own bound)", code)
	}
	close(release)
	for range 2 {
		if code := <-done; code != 200 {
			t.Errorf("a request in flight: %d, want 200", code)
		}
	}
	if code, _ := get(t, http.DefaultClient, url, ""); code != 200 {
		t.Errorf("after the requests in flight ended: %d, want 200", code)
	}
}

// On the HTTPS port only GET /metrics reaches the reviews: another path or method is
// refused before any TokenReview, whatever the token.
func TestSecureMetricsReviewsOnlyGetMetrics(t *testing.T) {
	api := newFakeAPI()
	api.users["good"] = "scraper"
	api.allowed["scraper"] = true
	s := start(t, Options{Flags: Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0", Secure: true}, Client: api.client, ReviewLimits: noLimits})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://" + s.MetricsAddr.String()
	for _, path := range []string{"/metrics/x", "/", "/healthz", "/metricsx"} {
		if code, _ := get(t, client, base+path, "random-"+path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer random-post")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
	if tr, sar := api.counts(); tr != 0 || sar != 0 {
		t.Fatalf("requests to other paths and methods: %d TokenReviews, %d SubjectAccessReviews; want none", tr, sar)
	}
	if code, body := get(t, client, base+"/metrics", "good"); code != 200 || body != "ok /metrics" {
		t.Fatalf("GET /metrics with a good token: %d %q", code, body)
	}
	if code, _ := get(t, client, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a token: %d, want 401", code)
	}
}
