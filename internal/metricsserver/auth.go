package metricsserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
)

// The kubelet's defaults for its delegated authentication and authorization
// (--authentication-token-webhook-cache-ttl, --authorization-webhook-cache-*-ttl,
// and the apiserver library's webhook retry backoff).
const (
	tokenReviewCacheTTL = 2 * time.Minute
	tokenReviewTimeout  = 10 * time.Second
	allowCacheTTL       = 5 * time.Minute
	denyCacheTTL        = 30 * time.Second
)

var webhookRetryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Delegated asks the API server who a request's bearer token belongs to
// (TokenReview) and whether that user may get the request's path
// (SubjectAccessReview on a non-resource URL), like the kubelet does for its own
// /metrics. Anonymous requests are refused.
type Delegated struct {
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
}

// NewDelegated builds the API server's delegating authenticator and authorizer on
// client; the agent's ServiceAccount needs create on tokenreviews and
// subjectaccessreviews.
func NewDelegated(client kubernetes.Interface) (*Delegated, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                nil, // no anonymous access
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: tokenReviewTimeout,
		WebhookRetryBackoff:      &webhookRetryBackoff,
		CacheTTL:                 tokenReviewCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegating authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       &webhookRetryBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegating authorizer: %w", err)
	}
	return &Delegated{Authenticator: authn, Authorizer: authz}, nil
}

// Wrap serves next only to authenticated and authorized requests: 401 without a
// valid token, 403 when the API server does not allow the user the verb on the
// path (GET /metrics: get on nonResourceURL /metrics), 500 when it cannot say.
func (d *Delegated) Wrap(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := d.Authenticator.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				log.Debug("metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{
			User:            resp.User,
			Verb:            strings.ToLower(r.Method),
			Path:            r.URL.Path,
			ResourceRequest: false,
		}
		decision, reason, err := d.Authorizer.Authorize(r.Context(), attrs)
		if err != nil {
			log.Warn("metrics request: authorization failed", "user", resp.User.GetName(), "verb", attrs.Verb, "path", attrs.Path, "err", err)
			http.Error(w, "Authorization error (user="+resp.User.GetName()+", verb="+attrs.Verb+", path="+attrs.Path+")", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			log.Debug("metrics request forbidden", "user", resp.User.GetName(), "verb", attrs.Verb, "path", attrs.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s)", resp.User.GetName(), attrs.Verb, attrs.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
