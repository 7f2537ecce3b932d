package metricsserver

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// selfSignedValidity is the lifetime of a generated serving certificate; it is
// replaced once two thirds of it have passed, so a scraper never meets an
// expired one.
const selfSignedValidity = 90 * 24 * time.Hour

// selfSigned is a serving certificate generated in memory (the kubelet does the
// same when it is given none), replaced before it expires. Scrapers cannot verify
// it; they authenticate themselves with a token, and users who want verified TLS
// mount a certificate (--tls-cert-file).
type selfSigned struct {
	host     string
	validity time.Duration
	now      func() time.Time
	log      *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	renewAt  time.Time
	notAfter time.Time
}

func newSelfSigned(host string, validity time.Duration, now func() time.Time, log *slog.Logger) (*selfSigned, error) {
	s := &selfSigned{host: host, validity: validity, now: now, log: log}
	if err := s.generate(); err != nil {
		return nil, err
	}
	return s, nil
}

// GetCertificate is tls.Config.GetCertificate: the current certificate, a new one
// when two thirds of the current one's lifetime have passed.
func (s *selfSigned) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.now().After(s.renewAt) {
		old := s.notAfter
		if err := s.generate(); err != nil {
			if s.now().Before(old) {
				s.log.Error("renewing the self-signed metrics certificate; serving the current one until it expires", "notAfter", old, "err", err)
				return s.cert, nil
			}
			return nil, err
		}
		s.log.Info("self-signed metrics certificate renewed", "previousNotAfter", old, "notAfter", s.notAfter)
	}
	return s.cert, nil
}

func (s *selfSigned) generate() error {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{Host: s.host, MaxAge: s.validity})
	if err != nil {
		return fmt.Errorf("generating a self-signed serving certificate for %s: %w", s.host, err)
	}
	cert, leaf, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	s.cert, s.renewAt, s.notAfter = cert, s.now().Add(s.validity*2/3), leaf.NotAfter
	return nil
}

// fromFiles serves the certificate and key of two files (a mounted Secret, e.g.
// one cert-manager renews), re-read at a handshake once certReloadInterval has
// passed since the last read: a scraper sees a replaced pair within that interval,
// with no watch and no goroutine.
type fromFiles struct {
	certFile, keyFile string
	now               func() time.Time

	mu      sync.Mutex
	readAt  time.Time
	certPEM []byte
	keyPEM  []byte
	parsed  *tls.Certificate
}

// certReloadInterval: how stale a mounted pair may be (the kubelet itself takes up
// to a minute to update a Secret volume).
var certReloadInterval = 10 * time.Second

func newFromFiles(certFile, keyFile string, now func() time.Time) (*fromFiles, error) {
	f := &fromFiles{certFile: certFile, keyFile: keyFile, now: now}
	if _, err := f.GetCertificate(nil); err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s, --tls-private-key-file %s: %w", certFile, keyFile, err)
	}
	return f, nil
}

// GetCertificate is tls.Config.GetCertificate: the files' current pair. A pair
// that cannot be read or does not parse (files caught mid-update) keeps the last
// good one.
func (f *fromFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parsed != nil && f.now().Sub(f.readAt) < certReloadInterval {
		return f.parsed, nil
	}
	f.readAt = f.now()
	certPEM, keyPEM, err := f.read()
	if err == nil && f.parsed != nil && bytes.Equal(certPEM, f.certPEM) && bytes.Equal(keyPEM, f.keyPEM) {
		return f.parsed, nil
	}
	var cert *tls.Certificate
	if err == nil {
		cert, _, err = parsePair(certPEM, keyPEM)
	}
	if err != nil {
		if f.parsed != nil {
			return f.parsed, nil
		}
		return nil, err
	}
	f.certPEM, f.keyPEM, f.parsed = certPEM, keyPEM, cert
	return cert, nil
}

func (f *fromFiles) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(f.certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(f.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, *x509.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate and key: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	cert.Leaf = leaf
	return &cert, leaf, nil
}
