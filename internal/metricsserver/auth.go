package metricsserver

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/kube"
)

// The kubelet's defaults for its delegated authentication and authorization
// (--authentication-token-webhook-cache-ttl, which the apiserver library applies to
// accepted and rejected tokens alike, --authorization-webhook-cache-*-ttl, and the
// library's webhook retry backoff), which this file used to link.
const (
	tokenCacheTTL     = 2 * time.Minute
	rejectedTokenTTL  = 2 * time.Minute
	allowCacheTTL     = 5 * time.Minute
	denyCacheTTL      = 30 * time.Second
	reviewTimeout     = 10 * time.Second
	tokenCacheSize    = 1024 // distinct accepted tokens: a node has a few scrapers
	rejectedCacheSize = 4096 // distinct rejected tokens, kept apart so garbage cannot evict good tokens
	decisionCacheSize = 1024
)

var reviewRetryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// ReviewLimits bound the TokenReviews a node's agent asks for tokens it has not seen
// (cached answers cost nothing): per source IP, so one noisy client cannot starve a
// scraper on another address, and in all, so many addresses cannot multiply the load
// the fleet puts on the API server.
type ReviewLimits struct {
	PerSource      rate.Limit
	PerSourceBurst int
	Total          rate.Limit
	TotalBurst     int
	// Sources is how many source addresses have a bucket of their own; the least
	// recently seen is forgotten (and starts again with a full bucket).
	Sources int
}

// DefaultReviewLimits: a scraper needs one review per token per tokenCacheTTL, so a
// review a second per address is far above need; 10/s per agent is 10,000/s for a
// 1,000-node fleet only if every node is attacked at once.
var DefaultReviewLimits = ReviewLimits{PerSource: 1, PerSourceBurst: 5, Total: 10, TotalBurst: 20, Sources: 1024}

// ReviewClient is the two API groups Delegated asks; kube.Interface has both.
type ReviewClient interface {
	AuthenticationV1() kube.AuthenticationV1Interface
	AuthorizationV1() kube.AuthorizationV1Interface
}

// Delegated asks the API server who a request's bearer token belongs to
// (TokenReview) and whether that user may get the request's path
// (SubjectAccessReview on a non-resource URL), like the kubelet does for its own
// /metrics. Anonymous requests are refused. Answers are cached (accepted and
// rejected tokens for tokenCacheTTL and rejectedTokenTTL, allowed and denied
// decisions for allowCacheTTL and denyCacheTTL; errors are not cached), and a token
// not in either cache is reviewed only if its source's rate limit allows.
type Delegated struct {
	tokenReviews  kube.TokenReviewInterface
	accessReviews kube.SubjectAccessReviewInterface
	limiter       *reviewLimiter

	accepted  *cache.LRUExpireCache // sha256(token) -> authenticationv1.UserInfo
	rejected  *cache.LRUExpireCache // sha256(token) -> struct{}
	decisions *cache.LRUExpireCache // SubjectAccessReviewSpec as JSON -> bool (allowed)
	flights   singleflight.Group    // concurrent requests with one token cost one review
}

// NewDelegated asks through client; the agent's ServiceAccount needs create on
// tokenreviews and subjectaccessreviews.
func NewDelegated(client ReviewClient, limits ReviewLimits) *Delegated {
	return newDelegated(client, limits, clock.RealClock{})
}

func newDelegated(client ReviewClient, limits ReviewLimits, clk cache.Clock) *Delegated {
	return &Delegated{
		tokenReviews:  client.AuthenticationV1().TokenReviews(),
		accessReviews: client.AuthorizationV1().SubjectAccessReviews(),
		limiter:       newReviewLimiter(limits),
		accepted:      cache.NewLRUExpireCacheWithClock(tokenCacheSize, clk),
		rejected:      cache.NewLRUExpireCacheWithClock(rejectedCacheSize, clk),
		decisions:     cache.NewLRUExpireCacheWithClock(decisionCacheSize, clk),
	}
}

// errRateLimited: the token needs a review and its source has used its share.
var errRateLimited = errors.New("too many token reviews from this address")

// Wrap serves next only to authenticated and authorized requests: 401 without a
// valid token, 429 when the token needs a review its source may not have yet, 403
// when the API server does not allow the user the verb on the path (GET /metrics:
// get on nonResourceURL /metrics), 500 when it cannot say.
func (d *Delegated) Wrap(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := d.authenticate(r)
		if errors.Is(err, errRateLimited) {
			log.Debug("metrics request: token review rate-limited", "remote", r.RemoteAddr)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
			return
		}
		if err != nil || user == nil {
			if err != nil {
				log.Debug("metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb, path := strings.ToLower(r.Method), r.URL.Path
		allowed, err := d.authorize(r.Context(), user, verb, path)
		if err != nil {
			log.Warn("metrics request: authorization failed", "user", user.Username, "verb", verb, "path", path, "err", err)
			http.Error(w, "Authorization error (user="+user.Username+", verb="+verb+", path="+path+")", http.StatusInternalServerError)
			return
		}
		if !allowed {
			log.Debug("metrics request forbidden", "user", user.Username, "verb", verb, "path", path)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s)", user.Username, verb, path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken is the token of an "Authorization: Bearer <token>" header, as the
// apiserver library reads it; "" when there is none.
func bearerToken(r *http.Request) string {
	parts := strings.SplitN(strings.TrimSpace(r.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") {
		return ""
	}
	return parts[1]
}

// authenticate returns the token's user, nil when the request has no token or the
// API server does not accept it.
func (d *Delegated) authenticate(r *http.Request) (*authenticationv1.UserInfo, error) {
	token := bearerToken(r)
	if token == "" {
		return nil, nil
	}
	sum := sha256.Sum256([]byte(token))
	key := string(sum[:])
	if u, ok := d.accepted.Get(key); ok {
		return u.(*authenticationv1.UserInfo), nil
	}
	if _, ok := d.rejected.Get(key); ok {
		return nil, nil
	}
	if !d.limiter.allow(sourceIP(r.RemoteAddr)) {
		return nil, errRateLimited
	}
	// The review outlives a caller that hangs up: others may be waiting on it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), reviewTimeout)
	defer cancel()
	u, err, _ := d.flights.Do(key, func() (any, error) {
		var review *authenticationv1.TokenReview
		err := withRetry(ctx, func(ctx context.Context) error {
			var err error
			review, err = d.tokenReviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("TokenReview: %w", err)
		}
		if !review.Status.Authenticated {
			d.rejected.Add(key, struct{}{}, rejectedTokenTTL)
			if review.Status.Error != "" {
				return nil, fmt.Errorf("TokenReview: %s", review.Status.Error)
			}
			return (*authenticationv1.UserInfo)(nil), nil
		}
		user := review.Status.User
		d.accepted.Add(key, &user, tokenCacheTTL)
		return &user, nil
	})
	if err != nil {
		return nil, err
	}
	return u.(*authenticationv1.UserInfo), nil
}

// authorize asks whether user may verb path (a non-resource URL).
func (d *Delegated) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	keyJSON, err := json.Marshal(spec)
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview key: %w", err)
	}
	key := string(keyJSON)
	if allowed, ok := d.decisions.Get(key); ok {
		return allowed.(bool), nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
	defer cancel()
	allowed, err, _ := d.flights.Do("sar\x00"+key, func() (any, error) {
		var review *authorizationv1.SubjectAccessReview
		err := withRetry(ctx, func(ctx context.Context) error {
			var err error
			review, err = d.accessReviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return false, fmt.Errorf("SubjectAccessReview: %w", err)
		}
		// An evaluation error with no decision is the API server not knowing: not cached.
		if !review.Status.Allowed && !review.Status.Denied && review.Status.EvaluationError != "" {
			return false, fmt.Errorf("SubjectAccessReview: %s", review.Status.EvaluationError)
		}
		if review.Status.Allowed {
			d.decisions.Add(key, true, allowCacheTTL)
		} else {
			d.decisions.Add(key, false, denyCacheTTL)
		}
		return review.Status.Allowed, nil
	})
	if err != nil {
		return false, err
	}
	return allowed.(bool), nil
}

// withRetry calls call until it succeeds, fails for good, or reviewRetryBackoff or
// ctx ends; the errors worth retrying are the apiserver library's (connection
// refused or reset, 429, 5xx).
func withRetry(ctx context.Context, call func(context.Context) error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, reviewRetryBackoff, func(ctx context.Context) (bool, error) {
		last = call(ctx)
		if last == nil {
			return true, nil
		}
		if transient(last) {
			return false, nil
		}
		return false, last
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

func transient(err error) bool {
	return utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsUnexpectedServerError(err)
}

func sourceIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}

// reviewLimiter is a token bucket per source address and one for all.
type reviewLimiter struct {
	limits ReviewLimits
	total  *rate.Limiter

	mu      sync.Mutex
	sources *cache.LRUExpireCache // IP -> *rate.Limiter
}

// sourceBucketTTL forgets an address once its bucket would be full again anyway.
const sourceBucketTTL = 10 * time.Minute

func newReviewLimiter(l ReviewLimits) *reviewLimiter {
	return &reviewLimiter{limits: l, total: rate.NewLimiter(l.Total, l.TotalBurst), sources: cache.NewLRUExpireCache(max(l.Sources, 1))}
}

// allow takes a token from ip's bucket and the total one, or from neither.
func (l *reviewLimiter) allow(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var src *rate.Limiter
	if v, ok := l.sources.Get(ip); ok {
		src = v.(*rate.Limiter)
	} else {
		src = rate.NewLimiter(l.limits.PerSource, l.limits.PerSourceBurst)
	}
	l.sources.Add(ip, src, sourceBucketTTL)
	now := time.Now()
	rs := src.ReserveN(now, 1)
	if !rs.OK() || rs.DelayFrom(now) > 0 {
		rs.CancelAt(now)
		return false
	}
	rt := l.total.ReserveN(now, 1)
	if !rt.OK() || rt.DelayFrom(now) > 0 {
		rt.CancelAt(now)
		rs.CancelAt(now)
		return false
	}
	return true
}
