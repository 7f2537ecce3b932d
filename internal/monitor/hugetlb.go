package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// readHugetlbPool is the memory held by the kernel's hugetlb pools, every page
// size: /sys/kernel/mm/hugepages/hugepages-<size>kB/{nr,surplus}_hugepages
// × size. Reserved hugepages are in MemTotal but in no memory cgroup's usage
// (the hugetlb controller accounts them), so MemTotal − working set counts
// them as available although no ordinary allocation can have them
// (kubernetes#137984). No such directory: no hugetlb, 0.
func readHugetlbPool(hostRoot string) (int64, error) {
	dir := nodefs.HostPath(hostRoot, "/sys/kernel/mm/hugepages")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", dir, err)
	}
	var total int64
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
			n, err := nodefs.ReadInt64(filepath.Join(dir, e.Name(), f))
			if err != nil {
				return 0, err
			}
			total += n * kb << 10
		}
	}
	return total, nil
}
