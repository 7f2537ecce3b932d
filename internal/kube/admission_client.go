package kube

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
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

// Secrets of namespace.
func (a *AdmissionClient) Secrets(namespace string) Resource[*corev1.Secret] {
	return Resource[*corev1.Secret]{a.core, "secrets", namespace, func() *corev1.Secret { return &corev1.Secret{} }}
}

// Pods of namespace.
func (a *AdmissionClient) Pods(namespace string) PodInterface { return coreV1{a.core}.Pods(namespace) }

// ValidatingWebhookConfigurations, cluster-scoped.
func (a *AdmissionClient) ValidatingWebhookConfigurations() Resource[*admissionregistrationv1.ValidatingWebhookConfiguration] {
	return Resource[*admissionregistrationv1.ValidatingWebhookConfiguration]{a.admissionregistration,
		"validatingwebhookconfigurations", "", func() *admissionregistrationv1.ValidatingWebhookConfiguration {
			return &admissionregistrationv1.ValidatingWebhookConfiguration{}
		}}
}
