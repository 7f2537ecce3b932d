package nodefs

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadInt64ReadsMaxAndOverflowAsUnlimited(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int64
		err     string
	}{
		{"4096\n", 4096, ""},
		{"max\n", math.MaxInt64, ""},
		{"18446744073709551615\n", math.MaxInt64, ""}, // cgroup v1's unlimited counter
		{"9223372036854771712\n", 9223372036854771712, ""},
		{"12k\n", 0, `value "12k" is not an integer`},
	} {
		got, err := ReadInt64(write(t, tc.content))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadInt64(%q) error = %v, want %q", tc.content, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ReadInt64(%q) = %d, %v; want %d", tc.content, got, err, tc.want)
		}
		if got >= UnlimitedMemory != (tc.want >= 1<<62) {
			t.Errorf("%q: unlimited = %v", tc.content, got >= UnlimitedMemory)
		}
	}
}

func TestReadStatKeysNamesAMissingKey(t *testing.T) {
	p := write(t, "anon 10\nfile 20\ninactive_file 5\n")
	var anon, inactive int64
	if err := ReadStatKeys(p, map[string]*int64{"anon": &anon, "inactive_file": &inactive}); err != nil || anon != 10 || inactive != 5 {
		t.Fatalf("anon %d inactive %d err %v", anon, inactive, err)
	}
	var x int64
	if err := ReadStatKeys(p, map[string]*int64{"total_inactive_file": &x}); err == nil || !strings.Contains(err.Error(), `key "total_inactive_file" not present`) {
		t.Fatalf("missing key: %v", err)
	}
}

func TestReadStatKeysOptionalLeavesAnAbsentOptionalKeyAtMinusOne(t *testing.T) {
	p := write(t, "anon 10\nfile 20\ninactive_file 5\n")
	var inactive, file, cache int64
	if err := ReadStatKeysOptional(p, map[string]*int64{"inactive_file": &inactive}, map[string]*int64{"file": &file, "total_cache": &cache}); err != nil ||
		inactive != 5 || file != 20 || cache != -1 {
		t.Fatalf("inactive %d file %d total_cache %d err %v, want 5 20 -1 nil", inactive, file, cache, err)
	}
	if err := ReadStatKeysOptional(p, map[string]*int64{"total_inactive_file": &inactive}, map[string]*int64{"file": &file}); err == nil ||
		!strings.Contains(err.Error(), `key "total_inactive_file" not present`) {
		t.Fatalf("a missing required key with optional ones: %v", err)
	}
}

func TestWorkingSetClampsAtZero(t *testing.T) {
	if got := WorkingSet(100, 30); got != 70 {
		t.Errorf("WorkingSet(100, 30) = %d", got)
	}
	if got := WorkingSet(30, 100); got != 0 {
		t.Errorf("WorkingSet(30, 100) = %d, want 0", got)
	}
}

func TestStatfsMeasuresInFragments(t *testing.T) {
	u, err := Statfs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if u.Capacity <= 0 || u.Available < 0 || u.Available > u.Capacity || u.Device == 0 {
		t.Fatalf("Statfs = %+v", u)
	}
	if _, err := Statfs(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "statfs") {
		t.Fatalf("missing dir: %v", err)
	}
}

func TestHostPath(t *testing.T) {
	for _, tc := range [][3]string{{"", "/var/lib/kubelet", "/var/lib/kubelet"}, {"/", "/var/log/pods", "/var/log/pods"}, {"/host", "/var/lib/kubelet", "/host/var/lib/kubelet"}} {
		if got := HostPath(tc[0], tc[1]); got != tc[2] {
			t.Errorf("HostPath(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

func TestLayoutSplitsContainerfsOnlyBesideADedicatedImagefs(t *testing.T) {
	for _, tc := range []struct {
		node, image, container uint64
		want                   policy.FilesystemLayout
	}{
		{1, 1, 1, policy.FilesystemLayout{}},
		{1, 2, 2, policy.FilesystemLayout{DedicatedImageFs: true}},
		{1, 2, 3, policy.FilesystemLayout{DedicatedImageFs: true, SplitContainerFs: true}},
		{1, 1, 3, policy.FilesystemLayout{}}, // the kubelet has no layout for this: one filesystem
	} {
		if got := Layout(tc.node, tc.image, tc.container); got != tc.want {
			t.Errorf("Layout(%d, %d, %d) = %+v, want %+v", tc.node, tc.image, tc.container, got, tc.want)
		}
	}
}

type fsInfo runtimeapi.ImageFsInfoResponse

func (f *fsInfo) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return (*runtimeapi.ImageFsInfoResponse)(f), nil
}

func mounted(path string, used uint64) *runtimeapi.FilesystemUsage {
	return &runtimeapi.FilesystemUsage{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: path}, UsedBytes: &runtimeapi.UInt64Value{Value: used}}
}

func TestReadRuntimeFilesystemsTakesTheFirstEntryWithAMountpoint(t *testing.T) {
	got, err := ReadRuntimeFilesystems(context.Background(), &fsInfo{
		ImageFilesystems: []*runtimeapi.FilesystemUsage{mounted("", 1), mounted("/var/lib/containerd", 10)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.ImageMountpoint != "/var/lib/containerd" || *got.ImageUsed != 10 || got.ContainerMountpoint != got.ImageMountpoint {
		t.Fatalf("got %+v; want the second image entry, and containerfs = imagefs when none is reported", got)
	}
	got, err = ReadRuntimeFilesystems(context.Background(), &fsInfo{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{mounted("/images", 10)},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{mounted("/containers", 20)},
	})
	if err != nil || got.ContainerMountpoint != "/containers" || *got.ContainerUsed != 20 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := ReadRuntimeFilesystems(context.Background(), &fsInfo{}); err == nil {
		t.Fatal("no image filesystem: no error")
	}
}

// ReadSmallFile reads a whole file, refuses one larger than its buffer, and a missing
// file's error is os.ErrNotExist naming the path (callers tell "no such cgroup" apart).
func TestReadSmallFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "memory.stat")
	if err := os.WriteFile(path, []byte("cache 4096\nrss 8192\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSmallFile(path, make([]byte, 64))
	if err != nil || string(got) != "cache 4096\nrss 8192\n" {
		t.Errorf("read %q, %v", got, err)
	}
	if _, err := ReadSmallFile(path, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "larger than 8 bytes") {
		t.Errorf("into 8 bytes: %v, want an error saying it is larger", err)
	}
	missing := filepath.Join(dir, "gone")
	if _, err := ReadSmallFile(missing, make([]byte, 64)); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v, want os.ErrNotExist naming %s", err, missing)
	}
	if got, err := ReadSmallFile("/proc/self/stat", make([]byte, 4096)); err != nil || len(got) == 0 {
		t.Errorf("/proc/self/stat: %q, %v", got, err)
	}
}
