// Package metricsserver serves evictiond's HTTP endpoints: /metrics over HTTPS,
// its callers authenticated (TokenReview) and authorized (SubjectAccessReview on
// the non-resource URL) by the API server like the kubelet's own /metrics; and
// /healthz and /readyz over plain HTTP on a port of their own for the kubelet's
// probes, which carry no credentials.
package metricsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
)

// Flags are the endpoints' part of the command line.
type Flags struct {
	MetricsAddress string
	HealthAddress  string
	// Secure serves /metrics over HTTPS behind the API server's authentication and
	// authorization; false serves it plainly (scraping through a mesh that does both).
	Secure   bool
	CertFile string
	KeyFile  string
}

// AddFlags registers the flags with their defaults.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.MetricsAddress, "metrics-address", ":9809", "address of /metrics: HTTPS, callers authenticated and authorized by the API server (get on nonResourceURL /metrics), unless --metrics-secure=false")
	fs.StringVar(&f.HealthAddress, "health-address", "127.0.0.1:9810", "address of /healthz and /readyz, plain HTTP for the kubelet's probes (may equal --metrics-address when --metrics-secure=false); loopback by default: on the host network the kubelet probes there (httpGet host 127.0.0.1) and nothing off the node can")
	fs.BoolVar(&f.Secure, "metrics-secure", true, "serve /metrics over HTTPS with authentication and authorization; false serves it over plain HTTP to anyone who can reach the port (for scraping through a mesh)")
	fs.StringVar(&f.CertFile, "tls-cert-file", "", "serving certificate of /metrics (PEM, reloaded on change, e.g. a mounted Secret); empty: a self-signed certificate generated in memory and renewed before it expires")
	fs.StringVar(&f.KeyFile, "tls-private-key-file", "", "private key of --tls-cert-file")
}

// Validate checks the flags against each other.
func (f *Flags) Validate() error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return fmt.Errorf("--tls-cert-file %q, --tls-private-key-file %q: give both or neither", f.CertFile, f.KeyFile)
	}
	if f.Secure && f.HealthAddress == f.MetricsAddress {
		return fmt.Errorf("--health-address: value %q: must differ from --metrics-address while /metrics is served over HTTPS (--metrics-secure=true); the kubelet's probes are plain HTTP", f.HealthAddress)
	}
	if !f.Secure && f.CertFile != "" {
		return fmt.Errorf("--tls-cert-file: value %q: needs --metrics-secure=true", f.CertFile)
	}
	return nil
}

// Options for Start.
type Options struct {
	Flags
	// Handler serves /metrics, /healthz and /readyz; each listener passes on only its paths.
	Handler http.Handler
	// Client asks the API server to authenticate and authorize scrapers (Secure only);
	// a kube.Interface.
	Client ReviewClient
	// ReviewLimits bound the TokenReviews of unknown tokens; zero: DefaultReviewLimits.
	ReviewLimits ReviewLimits
	// Host names the self-signed certificate (the node's name).
	Host string
	Log  *slog.Logger
	// Now is the clock of the self-signed certificate's renewal and of a mounted
	// certificate's reload; default time.Now.
	Now func() time.Time
}

// Server is the running endpoints.
type Server struct {
	// MetricsAddr and HealthAddr are the bound addresses (the same when shared).
	MetricsAddr, HealthAddr net.Addr
	servers                 []*http.Server
}

// Start listens on both addresses and serves until Shutdown. Listening errors are
// returned at once.
func Start(ctx context.Context, o Options) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReviewLimits == (ReviewLimits{}) {
		o.ReviewLimits = DefaultReviewLimits
	}
	metricsHandler := o.Handler
	var tlsConfig *tls.Config
	if o.Secure {
		if o.Client == nil {
			return nil, errors.New("metrics server: --metrics-secure needs an API client for TokenReview and SubjectAccessReview")
		}
		getCert, err := certificate(o)
		if err != nil {
			return nil, err
		}
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert}
		// Only /metrics is reviewed: another path or method is refused before any review.
		metricsHandler = NewDelegated(o.Client, o.ReviewLimits).Wrap(o.Handler, o.Log)
	}
	metrics := http.NewServeMux()
	metrics.Handle("GET /metrics", metricsHandler)
	health := http.NewServeMux()
	health.Handle("GET /healthz", o.Handler)
	health.Handle("GET /readyz", o.Handler)

	s := &Server{}
	if !o.Secure && o.MetricsAddress == o.HealthAddress {
		metrics.Handle("GET /healthz", o.Handler)
		metrics.Handle("GET /readyz", o.Handler)
		lis, err := s.listen("--metrics-address", o.MetricsAddress)
		if err != nil {
			return nil, err
		}
		s.MetricsAddr, s.HealthAddr = lis.Addr(), lis.Addr()
		s.serve(lis, metrics, limits.MetricsInFlight, nil, o.Log)
		return s, nil
	}
	lis, err := s.listen("--metrics-address", o.MetricsAddress)
	if err != nil {
		return nil, err
	}
	s.MetricsAddr = lis.Addr()
	s.serve(lis, metrics, limits.MetricsInFlight, tlsConfig, o.Log)
	lis, err = s.listen("--health-address", o.HealthAddress)
	if err != nil {
		s.Shutdown(context.Background())
		return nil, err
	}
	s.HealthAddr = lis.Addr()
	s.serve(lis, health, limits.HealthInFlight, nil, o.Log)
	return s, nil
}

func certificate(o Options) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if o.CertFile != "" {
		f, err := newFromFiles(o.CertFile, o.KeyFile, o.Now)
		if err != nil {
			return nil, err
		}
		return f.GetCertificate, nil
	}
	host := o.Host
	if host == "" {
		host = "evictiond"
	}
	s, err := newSelfSigned(host, selfSignedValidity, o.Now, o.Log)
	if err != nil {
		return nil, err
	}
	return s.GetCertificate, nil
}

func (s *Server) listen(flagName, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flagName, addr, err)
	}
	return lis, nil
}

// serverLimits bound what a client can hold of the agent, on both listeners.
type serverLimits struct {
	// ReadHeaderTimeout and ReadTimeout: a client that sends its request slowly
	// (slowloris) is cut off; the requests carry no body.
	ReadHeaderTimeout, ReadTimeout time.Duration
	// WriteTimeout covers the handler: a token review and an access review
	// (reviewTimeout each, retries included) and writing the page.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection left idle this long. Without it every
	// connection a client leaves open stays in the agent (an fd and two goroutines
	// each): make soak's scraper, which did not reuse its connections, grew the agent
	// by one of each per scrape. Prometheus scrapes at least every minute and
	// reconnects when closed.
	IdleTimeout time.Duration
	// MaxHeaderBytes: a ServiceAccount token is about 1 KiB, an OIDC one a few.
	MaxHeaderBytes int
	// MetricsInFlight and HealthInFlight: requests served at once; more are answered
	// 429 at once. A node has a few scrapers and one kubelet.
	MetricsInFlight, HealthInFlight int
}

var limits = serverLimits{
	ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout:       10 * time.Second,
	WriteTimeout:      2*reviewTimeout + 10*time.Second,
	IdleTimeout:       2 * time.Minute,
	MaxHeaderBytes:    16 << 10,
	MetricsInFlight:   16,
	HealthInFlight:    16,
}

func (s *Server) serve(lis net.Listener, h http.Handler, inFlight int, tlsConfig *tls.Config, log *slog.Logger) {
	// Failed handshakes (port scanners, plain HTTP to the HTTPS port) are the caller's
	// problem: debug level.
	srv := &http.Server{Handler: limitInFlight(h, inFlight), TLSConfig: tlsConfig,
		ReadHeaderTimeout: limits.ReadHeaderTimeout, ReadTimeout: limits.ReadTimeout, WriteTimeout: limits.WriteTimeout,
		IdleTimeout: limits.IdleTimeout, MaxHeaderBytes: limits.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	s.servers = append(s.servers, srv)
	go func() {
		var err error
		if tlsConfig != nil {
			err = srv.ServeTLS(lis, "", "")
		} else {
			err = srv.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "address", lis.Addr().String(), "err", err)
		}
	}()
}

// limitInFlight serves at most n requests at once and answers the others 429
// without waiting: a client that floods the port gets refusals, not a queue.
func limitInFlight(h http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests in flight", http.StatusTooManyRequests)
		}
	})
}

// Shutdown stops both listeners, waiting for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) {
	for _, srv := range s.servers {
		_ = srv.Shutdown(ctx)
	}
}
