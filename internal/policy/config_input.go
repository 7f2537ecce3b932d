package policy

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
)

// Bounds on a configuration document, checked before it is parsed. The YAML
// parser keeps a node of a few hundred bytes for every scalar, so the number
// of nodes, not the byte count, is what bounds the memory a parse takes: a
// 1 MiB flow list of one-letter items ("[a,a,a,...]") took 148 MB of heap
// against the pod's 128 Mi limit. A real configuration has a few hundred nodes.
const (
	// MaxDocumentBytes is the largest ConfigMap the API server stores.
	MaxDocumentBytes = 1 << 20
	// MaxDocumentSeparators bounds the newlines, commas, colons, dashes and
	// brackets of a document: every YAML node but the first follows one of
	// them, so this bounds the nodes the parser can build.
	MaxDocumentSeparators = 50_000
	// maxReportedErrors bounds the problems listed for one document.
	maxReportedErrors = 100
)

// checkDocument rejects what the YAML decoder would accept silently or parse
// at too high a cost: more than MaxDocumentBytes, more than
// MaxDocumentSeparators, and a second YAML document (the decoder reads the
// first and ignores the rest, even when the rest is invalid).
func checkDocument(data []byte) FieldErrors {
	if len(data) > MaxDocumentBytes {
		return FieldErrors{{Field: "(document)", Value: fmt.Sprintf("%d bytes", len(data)),
			Rule: fmt.Sprintf("must be at most %d bytes (1 MiB, the largest ConfigMap)", MaxDocumentBytes)}}
	}
	separators := 0
	for _, b := range data {
		switch b {
		case '\n', ',', ':', '-', '[', '{':
			separators++
		}
	}
	if separators > MaxDocumentSeparators {
		return FieldErrors{{Field: "(document)", Value: fmt.Sprintf("%d separators (newlines, commas, colons, dashes, brackets)", separators),
			Rule: fmt.Sprintf("must be at most %d: a configuration is a few hundred lines, and parsing this many YAML nodes would take too much memory", MaxDocumentSeparators)}}
	}
	if e := SingleDocumentError(data); e != nil {
		return FieldErrors{*e}
	}
	return nil
}

// secondDocument finds content after a document marker ("---" or "..." at
// the start of a line) that follows content: the line number of the second
// document's first content, and 1 if there is one. A leading "---" and
// trailing empty documents are allowed. Markers cannot occur inside a scalar
// (the YAML spec forbids them at column 0 there), so a line scan is exact.
func secondDocument(data []byte) (line, found int) {
	content, ended := false, false
	for i, l := range bytes.Split(data, []byte("\n")) {
		l = bytes.TrimRight(l, "\r")
		marker := isDocumentMarker(l)
		rest := l
		if marker {
			rest = l[3:]
		}
		trimmed := bytes.TrimSpace(rest)
		hasContent := len(trimmed) > 0 && trimmed[0] != '#'
		if marker && content {
			ended = true
		}
		if hasContent {
			if ended {
				return i + 1, 1
			}
			content = true
		}
	}
	return 0, 0
}

func isDocumentMarker(l []byte) bool {
	if !bytes.HasPrefix(l, []byte("---")) && !bytes.HasPrefix(l, []byte("...")) {
		return false
	}
	return len(l) == 3 || l[3] == ' ' || l[3] == '\t'
}

// mapFields are the fields whose keys are data (signals; in a simulate
// scenario also pod UIDs and names), named field[key] as the checks name them.
var mapFields = map[string]bool{"evictionHard": true, "evictionSoft": true, "evictionSoftGracePeriod": true, "evictionMinimumReclaim": true,
	"observations": true, "podStats": true, "reclaimable": true, "containers": true, "volumes": true, "volumeInodes": true}

func isMapField(path string) bool {
	return mapFields[path[strings.LastIndexAny(path, ".]")+1:]]
}

// nonFiniteErrors names every NaN or infinity in a YAML document (.nan,
// .inf, -.Inf): JSON has no such numbers, so the conversion to JSON fails
// without saying where. Called on that failure only.
func nonFiniteErrors(data []byte) FieldErrors {
	var doc any
	if yamlv2.Unmarshal(data, &doc) != nil {
		return nil
	}
	var errs FieldErrors
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				errs = append(errs, FieldError{Field: path, Value: fmt.Sprint(v), Rule: "must be a finite number (NaN and infinity are not numbers a setting can take)"})
			}
		case map[any]any:
			keys := make([]string, 0, len(v))
			byKey := make(map[string]any, len(v))
			for k, val := range v {
				ks := fmt.Sprint(k)
				keys = append(keys, ks)
				byKey[ks] = val
			}
			sort.Strings(keys)
			for _, k := range keys {
				switch {
				case path == "":
					walk(k, byKey[k])
				case isMapField(path):
					walk(path+"["+k+"]", byKey[k]) // a signal, as Compile names it
				default:
					walk(path+"."+k, byKey[k])
				}
			}
		case []any:
			for i, item := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), item)
			}
		}
	}
	walk("", doc)
	for i := range errs {
		if errs[i].Field == "" {
			errs[i].Field = "(document)"
		}
	}
	return errs
}

// SingleDocumentError rejects a YAML stream of more than one document (for
// inputs other than the configuration, which checkDocument covers); nil if
// there is one.
func SingleDocumentError(data []byte) *FieldError {
	if line, n := secondDocument(data); n > 0 {
		return &FieldError{Field: "(document)", Value: fmt.Sprintf("a second YAML document at line %d", line),
			Rule: "must be a single YAML document: remove the --- separator and what follows it, or merge the documents"}
	}
	return nil
}

// YAMLError is the field errors for a document the YAML decoder refused:
// each NaN or infinity by its field, else the parser's own words.
func YAMLError(data []byte, err error) FieldErrors { return yamlError(data, err) }

// yamlError is the field error for a document the YAML decoder refused.
func yamlError(data []byte, err error) FieldErrors {
	if strings.Contains(err.Error(), "unsupported value") {
		if errs := nonFiniteErrors(data); len(errs) > 0 {
			return errs
		}
	}
	return FieldErrors{{Field: "(document)", Value: YAMLErrorText(err), Rule: "must be valid YAML: one document, no duplicate keys, no excessive aliasing"}}
}

// result is the errors found, and a last one saying how many more there were
// (a hostile document can hold tens of thousands).
func (c *compiler) result() FieldErrors {
	if c.dropped == 0 {
		return c.errs
	}
	return append(c.errs, FieldError{Field: "(document)", Value: fmt.Sprintf("%d more problems", c.dropped), Rule: "not listed: fix the ones above first"})
}
