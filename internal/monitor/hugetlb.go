package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// hugetlbPools reads the memory held by the kernel's hugetlb pools, every
// page size: /sys/kernel/mm/hugepages/hugepages-<size>kB/{nr,surplus}_hugepages
// × size. Reserved hugepages are in MemTotal but in no memory cgroup's usage
// (the hugetlb controller accounts them), so MemTotal − working set counts
// them as available although no ordinary allocation can have them
// (kubernetes#137984). No such directory: no hugetlb, 0. The page sizes are
// the kernel's and the CPU's, fixed at boot: the directory is listed once.
type hugetlbPools struct {
	dir, prefix string // prefix: dir + "/"

	mu     sync.Mutex
	listed bool
	files  []hugetlbFile
}

type hugetlbFile struct {
	path string
	kb   int64
}

func newHugetlbPools(hostRoot string) *hugetlbPools {
	dir := nodefs.HostPath(hostRoot, "/sys/kernel/mm/hugepages")
	return &hugetlbPools{dir: dir, prefix: dir + "/"}
}

// list lists the pools' files once; a failed listing is tried again at the
// next read.
func (h *hugetlbPools) list() ([]hugetlbFile, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listed {
		return h.files, nil
	}
	entries, err := os.ReadDir(h.dir)
	if errors.Is(err, fs.ErrNotExist) {
		h.listed = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", h.dir, err)
	}
	for _, e := range entries {
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		size, ok2 := strings.CutSuffix(size, "kB")
		if !ok || !ok2 {
			continue
		}
		kb, err := strconv.ParseInt(size, 10, 64)
		if err != nil {
			continue
		}
		for _, f := range []string{"nr_hugepages", "surplus_hugepages"} {
			h.files = append(h.files, hugetlbFile{path: filepath.Join(h.dir, e.Name(), f), kb: kb})
		}
	}
	h.listed = true
	return h.files, nil
}

// read is the pools' total in bytes.
func (h *hugetlbPools) read(files *nodefs.Files) (int64, error) {
	list, err := h.list()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, f := range list {
		n, err := files.ReadInt64(f.path)
		if err != nil {
			return 0, err
		}
		total += n * f.kb << 10
	}
	return total, nil
}
