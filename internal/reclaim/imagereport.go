package reclaim

import (
	"context"
	"sort"
	"time"
)

// Why an image is kept by image GC, as reported by Images.
const (
	KeptInUse  = "in use"
	KeptPinned = "pinned"
	KeptYoung  = "younger than the minimum age"
)

// ImageInfo is what image GC knows and decides about one image, for `evictiond observe` and
// for explaining why an image was or was not removed.
type ImageInfo struct {
	ID        string    `json:"id"`
	Tags      []string  `json:"tags,omitempty"`
	Size      uint64    `json:"size"`
	FirstSeen time.Time `json:"firstSeen"`
	LastUsed  time.Time `json:"lastUsed,omitzero"`
	// KeptBecause is empty for an image GC may remove, else KeptInUse, KeptPinned or KeptYoung.
	KeptBecause string `json:"keptBecause,omitempty"`
	// EvictionOrder is the image's place (1 = first) among the removable ones; 0 when kept.
	EvictionOrder int `json:"evictionOrder,omitempty"`
}

// Images lists the runtime's images with evictiond's records and image GC's decision for each,
// removable ones first in eviction order. It updates the records as TrackImages does.
func (r *Reclaimer) Images(ctx context.Context) ([]ImageInfo, error) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	rt, is, err := r.connect()
	if err != nil {
		return nil, err
	}
	imgs, used, err := r.trackImages(ctx, rt, is)
	if err != nil {
		return nil, err
	}
	pinned := newPinnedMatcher(append(append([]string{}, r.opts.PinnedImages...), sandboxImage(ctx, rt)))
	now := r.opts.Clock.Now()
	order := map[string]int{}
	for i, c := range r.imagesInEvictionOrder(imgs, used, pinned, now) {
		order[c.img.Id] = i + 1
	}
	out := make([]ImageInfo, 0, len(imgs))
	for _, img := range imgs {
		rec := r.state.records[img.Id]
		info := ImageInfo{ID: img.Id, Tags: img.RepoTags, Size: img.Size, FirstSeen: rec.FirstSeen,
			LastUsed: rec.LastUsed, EvictionOrder: order[img.Id]}
		switch {
		case info.EvictionOrder > 0:
		case used.uses(img):
			info.KeptBecause = KeptInUse
		case pinned.pins(img):
			info.KeptBecause = KeptPinned
		default:
			info.KeptBecause = KeptYoung
		}
		out = append(out, info)
	}
	sort.SliceStable(out, func(i, j int) bool {
		oi, oj := out[i].EvictionOrder, out[j].EvictionOrder
		switch {
		case oi > 0 && oj > 0:
			return oi < oj
		case oi > 0 || oj > 0:
			return oi > 0
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
