package reclaim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imagesInUse is every identifier by which containers (in any state, exited ones included)
// refer to their image: the spec they were created from, the resolved image ref and image ID.
type imagesInUse map[string]bool

func listImagesInUse(ctx context.Context, rt runtimeService) (imagesInUse, error) {
	containers, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	used := imagesInUse{}
	for _, c := range containers {
		for _, ref := range []string{c.GetImage().GetImage(), c.GetImageRef(), c.GetImageId()} {
			if ref != "" {
				used[ref] = true
			}
		}
	}
	return used, nil
}

func (u imagesInUse) uses(img *runtimeapi.Image) bool {
	if u[img.Id] {
		return true
	}
	for _, ref := range img.RepoTags {
		if u[ref] {
			return true
		}
	}
	for _, ref := range img.RepoDigests {
		if u[ref] {
			return true
		}
	}
	return false
}

// pinnedMatcher decides whether an image must never be removed.
type pinnedMatcher struct {
	exact        map[string]bool // IDs and full references
	repositories map[string]bool // references without tag or digest
}

func newPinnedMatcher(entries []string) pinnedMatcher {
	m := pinnedMatcher{exact: map[string]bool{}, repositories: map[string]bool{}}
	for _, e := range entries {
		if e == "" {
			continue
		}
		m.exact[e] = true
		if !strings.HasPrefix(e, "sha256:") && !strings.Contains(e, "@") && !hasTag(e) {
			m.repositories[e] = true
		}
	}
	return m
}

// hasTag reports whether a reference carries a tag: a colon after the last slash (a colon
// before it belongs to a registry port).
func hasTag(ref string) bool {
	return strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":")
}

func repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		return ref[:i]
	}
	if hasTag(ref) {
		return ref[:strings.LastIndex(ref, ":")]
	}
	return ref
}

func (m pinnedMatcher) pins(img *runtimeapi.Image) bool {
	if img.Pinned || m.exact[img.Id] {
		return true
	}
	for _, refs := range [][]string{img.RepoTags, img.RepoDigests} {
		for _, ref := range refs {
			if m.exact[ref] || m.repositories[repository(ref)] {
				return true
			}
		}
	}
	return false
}

// sandboxImage asks the runtime for its sandbox (pause) image, which it pulls on demand for
// every new pod: removing it would only cost a pull on the next pod start, or fail it on a node
// without registry access. containerd 1.x reports it in the verbose status' "config" JSON
// (sandboxImage). containerd 2 does not (that JSON is its runtime plugin's configuration only):
// it reports the image of pinned_images.sandbox pinned instead (Image.pinned, which
// pinnedMatcher honours), as 1.7 does. A runtime that does neither is covered by
// Options.PinnedImages.
func sandboxImage(ctx context.Context, rt runtimeService) string {
	st, err := rt.Status(ctx, true)
	if err != nil {
		return ""
	}
	raw, ok := st.GetInfo()["config"]
	if !ok {
		return ""
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return ""
	}
	return cfg.SandboxImage
}

// TrackImages records which images exist and which are in use now, and saves the state file
// if it changed. The CRI has no last-used time, so evictiond's LRU order is only as good as
// how often this runs: the daemon calls it periodically (every loop pass is fine; a listing
// costs milliseconds), and image GC calls it first.
func (r *Reclaimer) TrackImages(ctx context.Context) error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	rt, is, err := r.connect()
	if err != nil {
		return err
	}
	_, _, err = r.trackImages(ctx, rt, is)
	return err
}

func (r *Reclaimer) trackImages(ctx context.Context, rt runtimeService, is imageService) ([]*runtimeapi.Image, imagesInUse, error) {
	imgs, err := is.ListImages(ctx, &runtimeapi.ImageFilter{})
	if err != nil {
		return nil, nil, fmt.Errorf("CRI ListImages: %w", err)
	}
	used, err := listImagesInUse(ctx, rt)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*runtimeapi.Image, len(imgs))
	ids := make([]string, 0, len(imgs))
	for _, img := range imgs {
		byID[img.Id] = img
		ids = append(ids, img.Id)
	}
	r.state.observe(ids, func(id string) bool { return used.uses(byID[id]) }, r.opts.Clock.Now())
	if err := r.state.save(); err != nil {
		return nil, nil, err
	}
	return imgs, used, nil
}

// imageCandidate is an image eligible for removal, with its records.
type imageCandidate struct {
	img    *runtimeapi.Image
	record imageRecord
	// lruKey is the last-used time, or first seen for a never-used image.
	lruKey time.Time
}

// imagesInEvictionOrder returns the images that may be removed, least recently used first
// (never-used images count as used when first seen), ties broken by first seen: the kubelet's
// byLastUsedAndDetected. In-use, pinned and young images are left out and logged.
func (r *Reclaimer) imagesInEvictionOrder(imgs []*runtimeapi.Image, used imagesInUse, pinned pinnedMatcher, now time.Time) []imageCandidate {
	var out []imageCandidate
	for _, img := range imgs {
		rec := r.state.records[img.Id]
		switch {
		case used.uses(img):
			continue
		case pinned.pins(img):
			r.log.Debug("image pinned, keeping it", "image", img.Id, "tags", img.RepoTags)
			continue
		case now.Sub(rec.FirstSeen) < r.opts.ImageMinimumAge:
			r.log.Debug("image younger than the minimum age, keeping it", "image", img.Id, "tags", img.RepoTags,
				"firstSeen", rec.FirstSeen, "minimumAge", r.opts.ImageMinimumAge)
			continue
		}
		key := rec.LastUsed
		if key.IsZero() {
			key = rec.FirstSeen
		}
		out = append(out, imageCandidate{img: img, record: rec, lruKey: key})
	}
	// The ID tie-break makes the order total, so an unstable sort gives one answer.
	slices.SortFunc(out, func(a, b imageCandidate) int {
		if c := a.lruKey.Compare(b.lruKey); c != 0 {
			return c
		}
		if c := a.record.FirstSeen.Compare(b.record.FirstSeen); c != 0 {
			return c
		}
		return strings.Compare(a.img.Id, b.img.Id)
	})
	return out
}

// collectImages removes unused images in LRU order until the gain measured on fs reaches
// req.Need. Right before each removal it lists containers again: an image that a container
// created meanwhile uses is kept (and marked used).
func (r *Reclaimer) collectImages(ctx context.Context, rt runtimeService, is imageService,
	req Request, fs measuredFS, before int64, res *Result) error {
	if req.Need <= 0 {
		r.log.Info("image GC: nothing needed", "need", req.Need)
		return nil
	}
	imgs, used, err := r.trackImages(ctx, rt, is)
	if err != nil {
		return err
	}
	pinnedRefs := append([]string{}, r.opts.PinnedImages...)
	if sb := sandboxImage(ctx, rt); sb != "" {
		pinnedRefs = append(pinnedRefs, sb)
	}
	now := r.opts.Clock.Now()
	candidates := r.imagesInEvictionOrder(imgs, used, newPinnedMatcher(pinnedRefs), now)
	r.log.Info("image GC", "need", req.Need, "unit", fs.unit(), "images", len(imgs), "candidates", len(candidates))

	var freed, estimated int64
	defer func() {
		if err := r.state.save(); err != nil {
			res.Errors = append(res.Errors, err)
		}
	}()
	for _, c := range candidates {
		if r.dryRun.Load() {
			if estimated >= req.Need {
				break
			}
		} else if freed >= req.Need {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		id := c.img.Id
		if r.beforeImageRemoval != nil {
			r.beforeImageRemoval(ctx, id)
		}
		// The last check: containers created since the listing above keep their image.
		latest, err := listImagesInUse(ctx, rt)
		if err != nil {
			return err
		}
		if latest.uses(c.img) {
			r.log.Info("image GC: image came into use, keeping it", "image", id, "tags", c.img.RepoTags)
			r.state.markUsed(id, r.opts.Clock.Now())
			continue
		}
		if r.dryRun.Load() {
			r.log.Info("image GC: would remove image", "image", id, "tags", c.img.RepoTags, "size", c.img.Size,
				"lastUsed", c.record.LastUsed, "firstSeen", c.record.FirstSeen)
			// Image sizes are bytes; for an inode signal a dry run cannot estimate and lists
			// every candidate.
			if !fs.inodes {
				estimated += int64(c.img.Size)
			}
			res.WouldRemove++
			continue
		}
		err = is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: id})
		switch {
		case err == nil:
			res.ItemsRemoved++
			r.state.forget(id)
		case status.Code(err) == codes.NotFound:
			r.state.forget(id)
			continue
		case isRuntimeGone(ctx, err):
			return fmt.Errorf("CRI RemoveImage %s: %w", id, err)
		case isInUseError(err):
			// CRI-O refuses to remove an image a container uses; the runtime knows best.
			r.log.Info("image GC: runtime says the image is in use, keeping it", "image", id, "err", err)
			r.state.markUsed(id, r.opts.Clock.Now())
			continue
		default:
			r.log.Warn("image GC: removing image failed", "image", id, "err", err)
			res.Errors = append(res.Errors, fmt.Errorf("CRI RemoveImage %s: %w", id, err))
			continue
		}
		avail, err := fs.available()
		if err != nil {
			return err
		}
		freed = avail - before
		r.log.Info("image GC: removed image", "image", id, "tags", c.img.RepoTags, "size", c.img.Size,
			"lastUsed", c.record.LastUsed, "firstSeen", c.record.FirstSeen, "freedSoFar", freed, "need", req.Need)
	}
	if !r.dryRun.Load() && freed < req.Need {
		r.log.Warn("image GC: could not free what was needed", "need", req.Need, "freed", freed, "unit", fs.unit())
	}
	return nil
}

// isRuntimeGone reports whether err means the runtime cannot be reached (or the caller gave up),
// so that going on with the next item is pointless.
func isRuntimeGone(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

func isInUseError(err error) bool {
	if status.Code(err) == codes.FailedPrecondition {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "in use") || strings.Contains(msg, "being used")
}

// DefaultTrackInterval is how often RunImageTracker records image use: the precision of
// evictiond's LRU order. A pass costs a few milliseconds (see BenchmarkTrackImages).
const DefaultTrackInterval = 10 * time.Second

// RunImageTracker calls TrackImages every interval (DefaultTrackInterval when 0) until ctx
// ends. The daemon runs it in its own goroutine; it serializes with Run. Failures are logged
// when they start and when they end, not on every pass.
func (r *Reclaimer) RunImageTracker(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultTrackInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	failing := false
	for {
		err := r.TrackImages(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			r.log.Warn("image tracking failing; LRU order is not updated meanwhile", "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("image tracking works again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
