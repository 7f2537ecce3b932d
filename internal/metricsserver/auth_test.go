package metricsserver

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/kube/kubefake"
)

// fakeAPI answers TokenReviews and SubjectAccessReviews from tables and counts them.
type fakeAPI struct {
	client *kubefake.Clientset
	// users: token -> user name; a token not listed is not authenticated.
	users map[string]string
	// allowed: user names allowed get /metrics.
	allowed map[string]bool
	// tokenErr and sarErr, when set, fail the reviews.
	tokenErr, sarErr error

	mu                    sync.Mutex
	tokenReviews, sarsLen int
	lastSAR               authorizationv1.SubjectAccessReviewSpec
}

// emptyAPI is a fake API server without objects (NewClientset fails only on one).
func emptyAPI() *kubefake.Clientset {
	c, err := kubefake.NewClientset()
	if err != nil {
		panic(err)
	}
	return c
}

func newFakeAPI() *fakeAPI {
	f := &fakeAPI{client: emptyAPI(), users: map[string]string{}, allowed: map[string]bool{}}
	f.client.OnCall("create", "tokenreviews", func(a kubefake.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tokenReviews++
		if f.tokenErr != nil {
			return true, nil, f.tokenErr
		}
		tr := a.Object.(*authenticationv1.TokenReview).DeepCopy()
		if name, ok := f.users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: name, UID: "uid-" + name, Groups: []string{"system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a"}}}}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	f.client.OnCall("create", "subjectaccessreviews", func(a kubefake.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.sarsLen++
		if f.sarErr != nil {
			return true, nil, f.sarErr
		}
		sar := a.Object.(*authorizationv1.SubjectAccessReview).DeepCopy()
		f.lastSAR = sar.Spec
		ok := sar.Spec.NonResourceAttributes != nil && sar.Spec.NonResourceAttributes.Path == "/metrics" &&
			sar.Spec.NonResourceAttributes.Verb == "get" && f.allowed[sar.Spec.User]
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: ok}
		return true, sar, nil
	})
	return f
}

func (f *fakeAPI) counts() (tokenReviews, sars int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenReviews, f.sarsLen
}

// generous limits, for tests that are not about them.
var noLimits = ReviewLimits{PerSource: 1000, PerSourceBurst: 1000, Total: 1000, TotalBurst: 1000, Sources: 16}

type authHarness struct {
	api     *fakeAPI
	clock   *clocktesting.FakeClock
	handler http.Handler
}

func newAuthHarness(limits ReviewLimits) *authHarness {
	api := newFakeAPI()
	clock := clocktesting.NewFakeClock(time.Now())
	d := newDelegated(api.client, limits, clock)
	h := d.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics") }), slog.New(slog.DiscardHandler))
	return &authHarness{api: api, clock: clock, handler: h}
}

// do serves GET /metrics from remote (ip:port) with the token, if any.
func (h *authHarness) do(remote, token string) (int, string) {
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.RemoteAddr = remote
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.handler.ServeHTTP(w, r)
	return w.Code, strings.TrimSpace(w.Body.String())
}

func TestAcceptedTokenAndAllowedUserAreReviewedOnceWithinTheirTTL(t *testing.T) {
	h := newAuthHarness(noLimits)
	h.api.users["good"] = "scraper"
	h.api.allowed["scraper"] = true
	for i := range 3 {
		if code, body := h.do("10.0.0.1:5000", "good"); code != 200 || body != "metrics" {
			t.Fatalf("request %d: %d %q, want 200 metrics", i, code, body)
		}
	}
	if tr, sar := h.api.counts(); tr != 1 || sar != 1 {
		t.Fatalf("3 requests with one token: %d TokenReviews, %d SubjectAccessReviews; want 1 and 1", tr, sar)
	}
	if got := h.api.lastSAR; got.User != "scraper" || got.UID != "uid-scraper" || len(got.Groups) != 1 || got.Extra["scopes"][0] != "a" {
		t.Errorf("SubjectAccessReview spec %+v: want the reviewed user's name, UID, groups and extra", got)
	}
	// Past the token's TTL but within the decision's: one more TokenReview only.
	h.clock.Step(tokenCacheTTL + time.Second)
	h.do("10.0.0.1:5000", "good")
	if tr, sar := h.api.counts(); tr != 2 || sar != 1 {
		t.Fatalf("after %v: %d TokenReviews, %d SubjectAccessReviews; want 2 and 1", tokenCacheTTL, tr, sar)
	}
	h.clock.Step(allowCacheTTL)
	h.do("10.0.0.1:5000", "good")
	if tr, sar := h.api.counts(); tr != 3 || sar != 2 {
		t.Fatalf("after the allow TTL: %d TokenReviews, %d SubjectAccessReviews; want 3 and 2", tr, sar)
	}
}

func TestRejectedTokenIsNotReviewedAgainWithinItsTTL(t *testing.T) {
	h := newAuthHarness(noLimits)
	for i := range 5 {
		if code, _ := h.do("10.0.0.1:5000", "forged"); code != http.StatusUnauthorized {
			t.Fatalf("request %d with a rejected token: %d, want 401", i, code)
		}
	}
	if tr, _ := h.api.counts(); tr != 1 {
		t.Fatalf("5 requests with one rejected token: %d TokenReviews, want 1", tr)
	}
	h.clock.Step(rejectedTokenTTL + time.Second)
	h.do("10.0.0.1:5000", "forged")
	if tr, _ := h.api.counts(); tr != 2 {
		t.Fatalf("after the rejection's TTL: %d TokenReviews, want 2", tr)
	}
}

func TestDeniedUserIsNotReviewedAgainWithinTheDenyTTL(t *testing.T) {
	h := newAuthHarness(noLimits)
	h.api.users["other"] = "stranger"
	for range 3 {
		if code, body := h.do("10.0.0.1:5000", "other"); code != http.StatusForbidden || body != "Forbidden (user=stranger, verb=get, path=/metrics)" {
			t.Fatalf("a user the API server denies: %d %q, want 403 naming user, verb and path", code, body)
		}
	}
	if _, sar := h.api.counts(); sar != 1 {
		t.Fatalf("3 denied requests: %d SubjectAccessReviews, want 1", sar)
	}
	// Bound to the ClusterRole since: allowed once the denial expires.
	h.api.allowed["stranger"] = true
	h.clock.Step(denyCacheTTL + time.Second)
	if code, _ := h.do("10.0.0.1:5000", "other"); code != 200 {
		t.Fatalf("after the deny TTL, now allowed: %d, want 200", code)
	}
}

func TestRequestWithoutABearerTokenCostsNoReview(t *testing.T) {
	h := newAuthHarness(noLimits)
	for _, header := range []string{"", "Basic dXNlcjpwYXNz", "Bearer", "Bearer  "} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		w := httptest.NewRecorder()
		h.handler.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", header, w.Code)
		}
	}
	if tr, sar := h.api.counts(); tr != 0 || sar != 0 {
		t.Fatalf("requests without a bearer token: %d TokenReviews, %d SubjectAccessReviews; want none", tr, sar)
	}
}

// Errors are the API server not answering, not an answer: nothing is cached, and an
// authorization error is a 500, not a 403.
func TestReviewErrorsAreNotCached(t *testing.T) {
	defer func(b time.Duration, s int) { reviewRetryBackoff.Duration, reviewRetryBackoff.Steps = b, s }(reviewRetryBackoff.Duration, reviewRetryBackoff.Steps)
	reviewRetryBackoff.Duration, reviewRetryBackoff.Steps = time.Millisecond, 2
	h := newAuthHarness(noLimits)
	h.api.users["good"] = "scraper"
	h.api.allowed["scraper"] = true
	h.api.tokenErr = apierrors.NewServiceUnavailable("etcd is down")
	if code, _ := h.do("10.0.0.1:5000", "good"); code != http.StatusUnauthorized {
		t.Fatalf("TokenReview failing: %d, want 401", code)
	}
	if tr, _ := h.api.counts(); tr != 2 {
		t.Errorf("a 503 TokenReview: %d tries, want 2 (retried by the backoff)", tr)
	}
	h.api.tokenErr = nil
	h.api.sarErr = apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("RBAC"))
	if code, body := h.do("10.0.0.1:5000", "good"); code != http.StatusInternalServerError || !strings.HasPrefix(body, "Authorization error (user=scraper") {
		t.Fatalf("SubjectAccessReview failing: %d %q, want 500 Authorization error", code, body)
	}
	if _, sar := h.api.counts(); sar != 1 {
		t.Errorf("a 403 SubjectAccessReview: %d tries, want 1 (not retried)", sar)
	}
	h.api.sarErr = nil
	if code, _ := h.do("10.0.0.1:5000", "good"); code != 200 {
		t.Fatalf("API server answering again: %d, want 200", code)
	}
}

// A client sending tokens the agent has not seen gets 429 once its bucket is empty,
// without a TokenReview; known tokens, other addresses, and the same address once
// the bucket refills are still served.
func TestUnknownTokensAreRateLimitedPerSourceBeforeAnyReview(t *testing.T) {
	h := newAuthHarness(ReviewLimits{PerSource: 0.001, PerSourceBurst: 3, Total: 1000, TotalBurst: 1000, Sources: 16})
	h.api.users["good"] = "scraper"
	h.api.allowed["scraper"] = true
	if code, _ := h.do("10.0.0.1:5000", "good"); code != 200 {
		t.Fatalf("first request with a good token: %d", code)
	}
	for i := range 10 {
		code, _ := h.do("10.0.0.9:"+strconv.Itoa(4000+i), "random-"+strconv.Itoa(i))
		want := http.StatusUnauthorized
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if code != want {
			t.Fatalf("unknown token %d from one address: %d, want %d", i, code, want)
		}
	}
	if tr, _ := h.api.counts(); tr != 1+3 {
		t.Fatalf("TokenReviews: %d, want 4 (the good token and the burst of 3)", tr)
	}
	// Cached answers need no review: still served, still refused.
	if code, _ := h.do("10.0.0.9:4100", "random-0"); code != http.StatusUnauthorized {
		t.Errorf("a rejected token from the limited address: %d, want 401 from the cache", code)
	}
	if code, _ := h.do("10.0.0.1:5001", "good"); code != 200 {
		t.Errorf("the good token: %d, want 200", code)
	}
	if code, _ := h.do("10.0.0.2:5000", "random-x"); code != http.StatusUnauthorized {
		t.Errorf("an unknown token from another address: %d, want 401 after a review", code)
	}
	if tr, _ := h.api.counts(); tr != 5 {
		t.Fatalf("TokenReviews: %d, want 5", tr)
	}
}

func TestUnknownTokensAreRateLimitedInAll(t *testing.T) {
	h := newAuthHarness(ReviewLimits{PerSource: 1000, PerSourceBurst: 1000, Total: 0.001, TotalBurst: 4, Sources: 16})
	var limited atomic.Int32
	for i := range 10 {
		if code, _ := h.do("10.0.1."+strconv.Itoa(i)+":4000", "random-"+strconv.Itoa(i)); code == http.StatusTooManyRequests {
			limited.Add(1)
		}
	}
	if tr, _ := h.api.counts(); tr != 4 || limited.Load() != 6 {
		t.Fatalf("10 unknown tokens from 10 addresses: %d TokenReviews, %d refused 429; want 4 and 6", tr, limited.Load())
	}
}

// Many requests at once with one new token cost one TokenReview.
func TestConcurrentRequestsWithOneTokenShareOneReview(t *testing.T) {
	h := newAuthHarness(noLimits)
	h.api.users["good"] = "scraper"
	h.api.allowed["scraper"] = true
	release := make(chan struct{})
	h.api.client.OnCall("create", "tokenreviews", func(kubefake.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil // on to the table reactor
	})
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i], _ = h.do("10.0.0.1:5000", "good") }()
	}
	time.Sleep(100 * time.Millisecond) // let them all reach the review
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: %d, want 200", i, c)
		}
	}
	if tr, _ := h.api.counts(); tr < 1 || tr > 2 {
		t.Errorf("8 concurrent requests with one token: %d TokenReviews, want 1 (2 if one arrived after the first finished)", tr)
	}
}
