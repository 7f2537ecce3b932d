package caps

import "golang.org/x/sys/unix"

// Capability is one Linux capability as the chart names it.
type Capability struct {
	Name string // as in securityContext.capabilities.add, e.g. SYS_RESOURCE
	Bit  int
}

// Shipped is the set the chart's securityContext adds after dropping ALL
// (charts/evictiond/values.yaml; TestShippedMatchesTheChart keeps the two
// equal).
var Shipped = []Capability{
	{"SYS_RESOURCE", unix.CAP_SYS_RESOURCE},
	{"DAC_READ_SEARCH", unix.CAP_DAC_READ_SEARCH},
	{"KILL", unix.CAP_KILL},
}

// Without is Shipped minus the named capability.
func Without(name string) []Capability {
	var out []Capability
	for _, c := range Shipped {
		if c.Name != name {
			out = append(out, c)
		}
	}
	return out
}

// Mask is the sets' bit mask, as /proc/<pid>/status prints it (CapEff...).
func Mask(cs []Capability) uint64 {
	var m uint64
	for _, c := range cs {
		m |= 1 << uint(c.Bit)
	}
	return m
}
