package containerd

import "testing"

func TestParseVersionAcceptsContainerd2Only(t *testing.T) {
	for _, tc := range []struct {
		out, want string
		ok        bool
	}{
		// hack/containerd.sh's build (version stamped, no revision).
		{"containerd github.com/containerd/containerd/v2 2.2.9 \n", "2.2.9", true},
		// An upstream release binary.
		{"containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n", "2.1.4", true},
		// Debian bookworm's package, which the tiers no longer run.
		{"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", "", false},
		{"containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", "", false},
		{"containerd: command not understood\n", "", false},
	} {
		got, err := parseVersion(tc.out)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseVersion(%q) = %q, %v; want %q, ok %v", tc.out, got, err, tc.want, tc.ok)
		}
	}
}
