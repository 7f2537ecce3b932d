package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
)

// CertConfig says where the webhook's serving certificate lives and who must trust it.
type CertConfig struct {
	Namespace string
	// Secret holds tls.crt (the serving certificate and its CA), tls.key and ca.crt.
	// Every replica serves the same pair: the first to start creates it.
	Secret string
	// Service is the webhook's Service: the certificate is for <service>.<namespace>.svc.
	Service string
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose webhooks'
	// caBundle is set to the Secret's CA.
	WebhookConfiguration string
	// Validity of a new certificate; it is replaced once less than a tenth is left.
	Validity time.Duration
}

// ServingCert keeps the webhook's certificate: generated once into a Secret, renewed
// before it expires, and its CA kept in the webhook configuration's caBundle (a
// configuration re-applied without it is repaired at the next Reconcile). No cert-manager
// and no key in the chart: a rendered manifest that carried a key would put it in Git.
type ServingCert struct {
	cfg      CertConfig
	secrets  SecretClient
	webhooks WebhookConfigurationClient
	log      *slog.Logger
	now      func() time.Time

	mu   sync.RWMutex
	cert *tls.Certificate
}

// SecretClient is the webhook's Secret as ServingCert uses it (client-go's typed
// SecretInterface, or kube.AdmissionClient's, which links no clientset).
type SecretClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	Create(ctx context.Context, secret *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error)
	Update(ctx context.Context, secret *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
}

// WebhookConfigurationClient is the ValidatingWebhookConfigurations as ServingCert uses them.
type WebhookConfigurationClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*admissionregistrationv1.ValidatingWebhookConfiguration, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error)
}

// NewServingCert keeps cfg's certificate in secrets (the Secret's namespace) and its CA
// in webhooks' configuration.
func NewServingCert(cfg CertConfig, secrets SecretClient, webhooks WebhookConfigurationClient, log *slog.Logger) *ServingCert {
	if cfg.Validity == 0 {
		cfg.Validity = 365 * 24 * time.Hour
	}
	return &ServingCert{cfg: cfg, secrets: secrets, webhooks: webhooks, log: log, now: time.Now}
}

// GetCertificate is tls.Config.GetCertificate; nil until the first Reconcile succeeds.
func (s *ServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cert == nil {
		return nil, fmt.Errorf("no serving certificate yet (Secret %s/%s)", s.cfg.Namespace, s.cfg.Secret)
	}
	return s.cert, nil
}

// Ready reports whether a certificate is loaded.
func (s *ServingCert) Ready() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert != nil
}

// Reconcile loads the Secret (creating or renewing it), serves its pair and sets the
// webhook configuration's caBundle.
func (s *ServingCert) Reconcile(ctx context.Context) error {
	sec, err := s.secret(ctx)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("the key pair in Secret %s/%s: %w", s.cfg.Namespace, s.cfg.Secret, err)
	}
	s.mu.Lock()
	s.cert = &pair
	s.mu.Unlock()
	return s.setCABundle(ctx, sec.Data["ca.crt"])
}

// Run reconciles until ctx ends: every interval, or every retry after a failure (at
// install the webhook configuration may be created after the pod starts).
func (s *ServingCert) Run(ctx context.Context, interval, retry time.Duration) {
	for {
		wait := interval
		if err := s.Reconcile(ctx); err != nil {
			s.log.Error("webhook serving certificate", "err", err)
			wait = retry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (s *ServingCert) secret(ctx context.Context) (*corev1.Secret, error) {
	sec, err := s.secrets.Get(ctx, s.cfg.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		data, err := s.generate()
		if err != nil {
			return nil, err
		}
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.cfg.Secret, Namespace: s.cfg.Namespace}, Type: corev1.SecretTypeTLS, Data: data}
		created, err := s.secrets.Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // another replica was first: serve its pair
			return s.secrets.Get(ctx, s.cfg.Secret, metav1.GetOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", s.cfg.Namespace, s.cfg.Secret, err)
		}
		s.log.Info("webhook serving certificate created", "secret", s.cfg.Secret)
		return created, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s/%s: %w", s.cfg.Namespace, s.cfg.Secret, err)
	}
	if s.fresh(sec.Data[corev1.TLSCertKey]) {
		return sec, nil
	}
	data, err := s.generate()
	if err != nil {
		return nil, err
	}
	sec.Data = data
	updated, err := s.secrets.Update(ctx, sec, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return s.secrets.Get(ctx, s.cfg.Secret, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("renewing Secret %s/%s: %w", s.cfg.Namespace, s.cfg.Secret, err)
	}
	s.log.Info("webhook serving certificate renewed", "secret", s.cfg.Secret)
	return updated, nil
}

// fresh reports whether the certificate chain parses and more than a tenth of the
// validity is left on each of its certificates.
func (s *ServingCert) fresh(chainPEM []byte) bool {
	certs, err := certutil.ParseCertsPEM(chainPEM)
	if err != nil || len(certs) == 0 {
		return false
	}
	for _, c := range certs {
		if s.now().Add(s.cfg.Validity / 10).After(c.NotAfter) {
			return false
		}
	}
	return true
}

func (s *ServingCert) generate() (map[string][]byte, error) {
	host := s.cfg.Service + "." + s.cfg.Namespace + ".svc"
	chain, key, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
		Host: host, AlternateDNS: []string{host + ".cluster.local"}, MaxAge: s.cfg.Validity})
	if err != nil {
		return nil, fmt.Errorf("generating the webhook's certificate: %w", err)
	}
	// The chain is the serving certificate then its CA.
	var ca []byte
	for rest := chain; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && c.IsCA {
			ca = pem.EncodeToMemory(block)
		}
	}
	if ca == nil {
		return nil, fmt.Errorf("generating the webhook's certificate: no CA in the chain")
	}
	return map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key, "ca.crt": ca}, nil
}

func (s *ServingCert) setCABundle(ctx context.Context, ca []byte) error {
	vwc, err := s.webhooks.Get(ctx, s.cfg.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", s.cfg.WebhookConfiguration, err)
	}
	var ops []string
	for i, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/webhooks/%d/clientConfig/caBundle","value":%q}`, i, base64.StdEncoding.EncodeToString(ca)))
		}
	}
	if len(ops) == 0 {
		return nil
	}
	// Every webhook of the configuration is this server's: the same bundle for each.
	patch := "[" + strings.Join(ops, ",") + "]"
	if _, err := s.webhooks.Patch(ctx, vwc.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the caBundle of ValidatingWebhookConfiguration %s: %w", vwc.Name, err)
	}
	s.log.Info("webhook caBundle set", "validatingWebhookConfiguration", vwc.Name, "webhooks", len(ops))
	return nil
}
