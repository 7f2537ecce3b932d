package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	certutil "k8s.io/client-go/util/cert"
)

func TestServingCertCreatesRenewsAndPublishesItsCA(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "evictiond-eviction"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "a.evictiond.io"}, {Name: "b.evictiond.io"}},
	})
	cfg := CertConfig{Namespace: "evictiond-system", Secret: "evictiond-webhook-tls", Service: "evictiond-webhook", WebhookConfiguration: "evictiond-eviction"}
	s := NewServingCert(cfg, client.CoreV1().Secrets(cfg.Namespace), client.AdmissionregistrationV1().ValidatingWebhookConfigurations(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := s.GetCertificate(&tls.ClientHelloInfo{}); err == nil || s.Ready() {
		t.Fatal("a certificate before the first Reconcile")
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	sec, err := client.CoreV1().Secrets(cfg.Namespace).Get(ctx, cfg.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret not created: %v", err)
	}
	cert, _ := s.GetCertificate(&tls.ClientHelloInfo{})
	leaf, err := certutil.ParseCertsPEM(sec.Data["tls.crt"])
	if err != nil || cert == nil || !bytes.Equal(cert.Certificate[0], leaf[0].Raw) {
		t.Fatalf("serving %v, want the Secret's certificate (%v)", cert, err)
	}
	if err := leaf[0].VerifyHostname("evictiond-webhook.evictiond-system.svc"); err != nil {
		t.Error(err)
	}
	vwc, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, cfg.WebhookConfiguration, metav1.GetOptions{})
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, sec.Data["ca.crt"]) || len(w.ClientConfig.CABundle) == 0 {
			t.Errorf("webhook %s caBundle %q, want the Secret's ca.crt", w.Name, w.ClientConfig.CABundle)
		}
	}

	// A second replica serves the same pair; nothing is rewritten.
	other := NewServingCert(cfg, client.CoreV1().Secrets(cfg.Namespace), client.AdmissionregistrationV1().ValidatingWebhookConfigurations(), s.log)
	if err := other.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if c2, _ := other.GetCertificate(nil); !bytes.Equal(c2.Certificate[0], cert.Certificate[0]) {
		t.Error("a second replica generated its own certificate")
	}

	// Within the last tenth of its validity the pair is replaced and the bundle follows.
	s.now = func() time.Time { return time.Now().Add(340 * 24 * time.Hour) }
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	renewed, _ := client.CoreV1().Secrets(cfg.Namespace).Get(ctx, cfg.Secret, metav1.GetOptions{})
	if bytes.Equal(renewed.Data["ca.crt"], sec.Data["ca.crt"]) {
		t.Fatal("certificate not renewed 25 days before it expires")
	}
	vwc, _ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, cfg.WebhookConfiguration, metav1.GetOptions{})
	if !bytes.Equal(vwc.Webhooks[1].ClientConfig.CABundle, renewed.Data["ca.crt"]) {
		t.Error("caBundle not updated to the renewed CA")
	}
}
