package daemon

import (
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/evictiond/evictiond/"

// TestArchitectureDocMatchesImports holds docs/architecture.md's package table
// to the code: every package of cmd/ and internal/ (test helpers aside) has a
// row, and the row lists exactly the packages of this module it imports.
func TestArchitectureDocMatchesImports(t *testing.T) {
	root := "../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `((?:internal|cmd)/[a-z0-9/]+)` \\| ([^|]*) \\|")
	tick := regexp.MustCompile("`([^`]+)`")
	documented := map[string][]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var imports []string
		for _, x := range tick.FindAllStringSubmatch(m[2], -1) {
			imports = append(imports, x[1])
		}
		slices.Sort(imports)
		documented[m[1]] = imports
	}

	var pkgs []string
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			if rel == "internal/testenv" || strings.HasPrefix(rel, "internal/testenv/") || filepath.Base(rel) == "testdata" {
				return filepath.SkipDir
			}
			if p, err := build.ImportDir(path, 0); err == nil && len(p.GoFiles) > 0 {
				pkgs = append(pkgs, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range pkgs {
		p, err := build.ImportDir(filepath.Join(root, rel), 0)
		if err != nil {
			t.Fatal(err)
		}
		var ours []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				ours = append(ours, strings.TrimPrefix(imp, module))
			}
		}
		slices.Sort(ours)
		want, ok := documented[rel]
		if !ok {
			t.Errorf("docs/architecture.md has no row for %s (imports %v)", rel, ours)
			continue
		}
		if !slices.Equal(ours, want) {
			t.Errorf("docs/architecture.md: %s imports %v; the doc says %v", rel, ours, want)
		}
		delete(documented, rel)
	}
	for rel := range documented {
		t.Errorf("docs/architecture.md has a row for %s, which is not a package", rel)
	}
}

// TestImportRules holds the rules of docs/architecture.md that a table row
// alone does not state: no package climbs back up to the loop to speak its
// vocabulary (internal/eviction holds it), the loop imports no
// implementation, and the command wires no part of the node.
func TestImportRules(t *testing.T) {
	root := "../.."
	forbidden := map[string][]string{
		"internal/kube":     {"internal/agent", "internal/daemon"},
		"internal/reclaim":  {"internal/agent", "internal/daemon", "internal/monitor", "internal/notify"},
		"internal/monitor":  {"internal/agent", "internal/daemon", "internal/notify", "internal/reclaim"},
		"internal/notify":   {"internal/agent", "internal/daemon", "internal/monitor", "internal/reclaim"},
		"internal/eviction": {"internal/agent", "internal/kube", "internal/reclaim", "internal/daemon"},
		"internal/agent":    {"internal/kube", "internal/reclaim", "internal/monitor", "internal/notify", "internal/daemon", "internal/node"},
		// The real node is built in internal/node and wired in internal/daemon:
		// the command parses flags and calls the daemon.
		"cmd/evictiond": {"internal/agent", "internal/brake", "internal/kube", "internal/notify", "internal/reclaim",
			"internal/nodefs", "internal/metrics", "internal/metricsserver", "internal/configfile"},
		// The simulated node stands where the real one does, never beside it.
		"internal/simulate": {"internal/node", "internal/monitor", "internal/notify", "internal/reclaim", "internal/kube"},
		"internal/node":     {"internal/daemon", "internal/kube", "internal/simulate"},
	}
	for pkg, banned := range forbidden {
		p, err := build.ImportDir(filepath.Join(root, pkg), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range p.Imports {
			if slices.Contains(banned, strings.TrimPrefix(imp, module)) {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}
