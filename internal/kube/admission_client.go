package kube

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// AdmissionClient is what `evictiond webhook` calls: its Secret, its
// ValidatingWebhookConfiguration and the pods it reviews evictions of, on Scheme
// (no clientset linked, as Client).
type AdmissionClient struct {
	core, admissionregistration *rest.RESTClient
}

// NewAdmissionClient is the webhook's client: one transport for both groups.
func NewAdmissionClient(c *rest.Config) (*AdmissionClient, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, fmt.Errorf("API client transport: %w", err)
	}
	a := &AdmissionClient{}
	if a.core, err = groupClient(cfg, httpClient, corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	if a.admissionregistration, err = groupClient(cfg, httpClient, admissionregistrationv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, fmt.Errorf("admissionregistration/v1 client: %w", err)
	}
	return a, nil
}

// SecretInterface is core/v1 Secrets as the webhook's serving certificate keeps them.
type SecretInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	Create(ctx context.Context, secret *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error)
	Update(ctx context.Context, secret *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
}

// ValidatingWebhookConfigurationInterface is the webhook's configuration as its serving
// certificate publishes its CA there.
type ValidatingWebhookConfigurationInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*admissionregistrationv1.ValidatingWebhookConfiguration, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error)
}

// Secrets of namespace.
func (a *AdmissionClient) Secrets(namespace string) SecretInterface {
	return resource[*corev1.Secret]{a.core, "secrets", namespace, func() *corev1.Secret { return &corev1.Secret{} }}
}

// Pods of namespace.
func (a *AdmissionClient) Pods(namespace string) PodInterface { return coreV1{a.core}.Pods(namespace) }

// ValidatingWebhookConfigurations, cluster-scoped.
func (a *AdmissionClient) ValidatingWebhookConfigurations() ValidatingWebhookConfigurationInterface {
	return resource[*admissionregistrationv1.ValidatingWebhookConfiguration]{a.admissionregistration,
		"validatingwebhookconfigurations", "", func() *admissionregistrationv1.ValidatingWebhookConfiguration {
			return &admissionregistrationv1.ValidatingWebhookConfiguration{}
		}}
}
