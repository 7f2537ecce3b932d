package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/evictiond/evictiond/internal/admission"
	"github.com/evictiond/evictiond/internal/daemon"
)

func init() { commands["webhook"] = runWebhook }

const webhookHelp = `Usage: evictiond webhook --agent=USER --service=NAME --secret=NAME --webhook-configuration=NAME [flags]

Serves the admission webhook that holds each agent's evictions to its own node
(docs/rbac.md): an eviction requested by the agent's ServiceAccount is allowed
only for a pod bound to the node its token claims. Keeps its serving certificate
in a Secret and its CA in the webhook configuration. The chart runs it.
`

// runWebhook serves the eviction webhook (internal/admission) until SIGTERM.
func runWebhook(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("webhook", webhookHelp, stdout, stderr)
	var cc admission.CertConfig
	address := fs.String("address", ":9443", "address of the HTTPS endpoint /validate-eviction (and /readyz)")
	agent := fs.String("agent", "", "username of the agent's ServiceAccount whose evictions are reviewed, system:serviceaccount:<namespace>:<name>")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty: in-cluster")
	fs.StringVar(&cc.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the webhook's Service and Secret (default $POD_NAMESPACE)")
	fs.StringVar(&cc.Service, "service", "", "the webhook's Service: its certificate is for <service>.<namespace>.svc")
	fs.StringVar(&cc.Secret, "secret", "", "Secret holding the serving certificate, created if missing and renewed before it expires")
	fs.StringVar(&cc.WebhookConfiguration, "webhook-configuration", "", "ValidatingWebhookConfiguration whose caBundle is kept equal to the Secret's CA")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	for _, f := range []struct{ name, value string }{{"agent", *agent}, {"namespace", cc.Namespace}, {"service", cc.Service},
		{"secret", cc.Secret}, {"webhook-configuration", cc.WebhookConfiguration}} {
		if f.value == "" {
			return usageError(fs, stderr, fmt.Errorf("--%s: value \"\": required", f.name))
		}
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	klog.SetSlogLogger(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serveWebhook(ctx, *address, *agent, *kubeconfig, cc, log); err != nil {
		log.Error("evictiond webhook stopped", "err", err)
		return exitFailure
	}
	return 0
}

func serveWebhook(ctx context.Context, address, agent, kubeconfig string, cc admission.CertConfig, log *slog.Logger) error {
	cfg, err := daemon.RestConfig(kubeconfig)
	if err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "evictiond-webhook"
	client, err := daemon.NewAdmissionClient(cfg)
	if err != nil {
		return err
	}
	cert := admission.NewServingCert(cc, client.Secrets(cc.Namespace), client.ValidatingWebhookConfigurations(), log)
	go cert.Run(ctx, 10*time.Minute, 2*time.Second)

	reviewer := &admission.EvictionReviewer{Agent: agent, Log: log,
		GetPod: func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
			return client.Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		}}
	mux := http.NewServeMux()
	mux.Handle("/validate-eviction", reviewer)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !cert.Ready() {
			http.Error(w, "no serving certificate yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	srv := &http.Server{
		Addr:              address,
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.GetCertificate},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// The API server's webhook timeout is at most 30 s; a review is one pod GET.
		WriteTimeout:   30 * time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 16 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	log.Info("evictiond webhook serving", "address", address, "agent", agent)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}
