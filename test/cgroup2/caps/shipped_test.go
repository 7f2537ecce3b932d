package caps

import (
	"os"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// The guest tests prove the chart's set: it must be the set they use.
func TestShippedMatchesTheChart(t *testing.T) {
	data, err := os.ReadFile("../../../charts/evictiond/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		SecurityContext struct {
			Capabilities struct {
				Drop []string `json:"drop"`
				Add  []string `json:"add"`
			} `json:"capabilities"`
		} `json:"securityContext"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	caps := values.SecurityContext.Capabilities
	if !slices.Equal(caps.Drop, []string{"ALL"}) {
		t.Errorf("chart drops %v, want [ALL] (the guest tests start from an empty set)", caps.Drop)
	}
	var names []string
	for _, c := range Shipped {
		names = append(names, c.Name)
	}
	if !slices.Equal(caps.Add, names) {
		t.Errorf("chart adds %v, the cgroup v2 tier's capability tests prove %v: keep them equal", caps.Add, names)
	}
}
