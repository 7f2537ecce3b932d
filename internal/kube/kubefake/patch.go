package kubefake

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// patch applies a patch to a stored object, as an update: a resourceVersion the patch
// sets must be the stored one (the API server's precondition, which nodestatus's taint
// patch relies on). The subresource does not narrow what the patch may change.
//
// Merge patches (RFC 7386) are applied in full; strategic merge patches as
// apimachinery's strategicpatch applies those without directives ($patch,
// $setElementOrder, ...): maps merge, a list whose field is tagged patchStrategy:"merge"
// merges its items by their patchMergeKey (a node's status.conditions by type) and any
// other list is replaced. A directive, a JSON patch or an apply patch is refused (415),
// so that a test never passes on a patch the fake would apply wrongly. The binary links
// no strategicpatch, which brings kube-openapi's models along.
func (s *Store) patch(resource, namespace, name string, pt types.PatchType, data []byte) (runtime.Object, error) {
	if pt != types.MergePatchType && pt != types.StrategicMergePatchType {
		return nil, apierrors.NewGenericServerResponse(415, "patch", groupResource(resource), name,
			fmt.Sprintf("patch type %s: the fake API server applies merge and strategic merge patches only", pt), 0, false)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s patch of %s %s: %v", pt, resource, name, err))
	}
	meta, _ := p["metadata"].(map[string]any)
	_, precondition := meta["resourceVersion"]
	for {
		cur, err := s.Get(resource, namespace, name)
		if err != nil {
			return nil, err
		}
		doc, err := toMap(cur)
		if err != nil {
			return nil, err
		}
		if pt == types.MergePatchType {
			doc = mergePatch(doc, p).(map[string]any)
		} else if doc, err = strategicMerge(doc, p, reflect.TypeOf(cur)); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("strategic merge patch of %s %s: %v", resource, name, err))
		}
		merged, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		obj := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
		if err := json.Unmarshal(merged, obj); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%s patch of %s %s: %v", pt, resource, name, err))
		}
		out, err := s.put(resource, obj, false)
		// Another write between the read and the update: the API server applies the
		// patch again to the newer object, unless the patch named the resourceVersion.
		if apierrors.IsConflict(err) && !precondition {
			continue
		}
		return out, err
	}
}

func toMap(obj runtime.Object) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

// mergePatch is RFC 7386's MergePatch: objects merge, null removes, anything else
// replaces.
func mergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = mergePatch(d[k], v)
	}
	return d
}

// strategicMerge merges patch into doc, the JSON of a value of Go type t, by t's
// patchStrategy and patchMergeKey tags.
func strategicMerge(doc, patch map[string]any, t reflect.Type) (map[string]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if doc == nil {
		doc = map[string]any{}
	}
	for k, pv := range patch {
		if strings.HasPrefix(k, "$") {
			return nil, fmt.Errorf("directive %s: not supported by the fake API server", k)
		}
		if pv == nil {
			delete(doc, k)
			continue
		}
		var ft reflect.Type
		var tag reflect.StructTag
		switch t.Kind() {
		case reflect.Map:
			ft = t.Elem()
		case reflect.Struct:
			f, ok := jsonField(t, k)
			if !ok {
				return nil, fmt.Errorf("field %s: not a field of %s", k, t)
			}
			ft, tag = f.Type, f.Tag
		default:
			return nil, fmt.Errorf("field %s: %s has no fields", k, t)
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		dv := doc[k]
		switch pm, isMap := pv.(map[string]any); {
		case isMap && (ft.Kind() == reflect.Struct || ft.Kind() == reflect.Map):
			dm, _ := dv.(map[string]any)
			merged, err := strategicMerge(dm, pm, ft)
			if err != nil {
				return nil, fmt.Errorf("%s.%w", k, err)
			}
			doc[k] = merged
		case ft.Kind() == reflect.Slice && slices.Contains(strings.Split(tag.Get("patchStrategy"), ","), "merge"):
			pl, ok := pv.([]any)
			if !ok {
				return nil, fmt.Errorf("field %s: a list merges with a list, not %T", k, pv)
			}
			dl, _ := dv.([]any)
			merged, err := mergeList(dl, pl, ft.Elem(), tag.Get("patchMergeKey"))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			doc[k] = merged
		default:
			doc[k] = pv
		}
	}
	return doc, nil
}

// mergeList merges the patch's items into doc's: an item with the key of one of doc's
// merges into it, any other is appended (a list of scalars: added unless present).
func mergeList(doc, patch []any, elem reflect.Type, mergeKey string) ([]any, error) {
	out := slices.Clone(doc)
	for _, pi := range patch {
		if mergeKey == "" {
			if !slices.ContainsFunc(out, func(d any) bool { return reflect.DeepEqual(d, pi) }) {
				out = append(out, pi)
			}
			continue
		}
		pm, ok := pi.(map[string]any)
		if !ok || pm[mergeKey] == nil {
			return nil, fmt.Errorf("an item without its merge key %s: %v", mergeKey, pi)
		}
		i := slices.IndexFunc(out, func(d any) bool {
			dm, ok := d.(map[string]any)
			return ok && reflect.DeepEqual(dm[mergeKey], pm[mergeKey])
		})
		if i < 0 {
			out = append(out, pi)
			continue
		}
		merged, err := strategicMerge(out[i].(map[string]any), pm, elem)
		if err != nil {
			return nil, err
		}
		out[i] = merged
	}
	return out, nil
}

// jsonField is t's field (or an inlined embedded struct's) named name in JSON.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tagName, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && (tagName == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if inner, ok := jsonField(ft, name); ok {
					return inner, true
				}
			}
			continue
		}
		if tagName == "" {
			tagName = f.Name
		}
		if tagName == name && tagName != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
