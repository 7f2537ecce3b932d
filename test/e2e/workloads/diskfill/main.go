// Command diskfill writes a file at a steady rate up to a target size and holds it until
// stopped: the pressure source of the disk scenario, pointed at an emptyDir mount.
//
//	diskfill -dir=/scratch -rate-mib=200 -target-mib=2048
//
// With -read-passes=N it then reads the file back N times before holding: a
// page read twice is on the kernel's active list, so the file's page cache
// counts in the pod's working set (usage - inactive_file) — the page-cache
// reader of the reclaim-before-evict scenario.
//
// With -mmap-loop it then maps the file and reads one byte of each page in turn, forever:
// a working set that is all clean, file-backed memory.
// Under a memory limit smaller than the file, every page it touches is charged at the
// limit, so the kernel reclaims another clean page for it — never short of reclaimable
// memory, it never OOM-kills — and the next lap refaults what it reclaimed: the pod sits at
// its limit stalled on memory, making next to no progress (the livelock scenario). It prints
// the pages it touched every 5 s, its progress. The kernel's readahead stays on: with
// MADV_RANDOM each refault is one synchronous 4 KiB read that 6.1 counts as I/O pressure, not
// memory pressure (the pod's io.pressure full 16-19%, memory.pressure full 1-6% in the v2 VM).
//
// Data is written with write(2) and flushed every step, so the filesystem's free space
// (what statfs and the disk signals see) drops as the file grows, not later.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	mib  = 1 << 20
	step = 50 * time.Millisecond
)

func main() {
	dir := flag.String("dir", "/scratch", "directory to fill (an emptyDir mount)")
	rateMiB := flag.Float64("rate-mib", 100, "write rate in MiB per second (> 0)")
	targetMiB := flag.Int64("target-mib", 1024, "stop writing at this size in MiB and hold (> 0)")
	readPasses := flag.Int("read-passes", 0, "once written, read the file back this many times, then hold")
	mmapLoop := flag.Bool("mmap-loop", false, "once written (and read back), map the file and touch each page in turn until stopped")
	flag.Parse()
	if *rateMiB <= 0 || *targetMiB <= 0 {
		fmt.Fprintf(os.Stderr, "diskfill: -rate-mib=%v -target-mib=%d: both must be above 0\n", *rateMiB, *targetMiB)
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	path := filepath.Join(*dir, "fill")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "diskfill: %v\n", err)
		os.Exit(1)
	}
	defer f.Close()

	block := make([]byte, mib)
	for i := range block {
		block[i] = byte(i*7 + 13)
	}
	fmt.Printf("diskfill: start path=%s rate=%.0fMiB/s target=%dMiB\n", path, *rateMiB, *targetMiB)
	start := time.Now()
	var written int64
	ticker := time.NewTicker(step)
	defer ticker.Stop()
	for written < *targetMiB*mib {
		select {
		case sig := <-stop:
			fmt.Printf("diskfill: %v at %dMiB, exiting\n", sig, written/mib)
			return
		case now := <-ticker.C:
			want := min(int64(*rateMiB*mib*now.Sub(start).Seconds()), *targetMiB*mib)
			for written+mib <= want {
				if _, err := f.Write(block); err != nil {
					fmt.Fprintf(os.Stderr, "diskfill: writing at %dMiB: %v (holding)\n", written/mib, err)
					*targetMiB = written / mib // disk full: hold what was written
					break
				}
				written += mib
			}
			if err := f.Sync(); err != nil {
				fmt.Fprintf(os.Stderr, "diskfill: fsync at %dMiB: %v\n", written/mib, err)
			}
		}
	}
	for pass := 1; pass <= *readPasses; pass++ {
		n, err := readBack(path, block)
		if err != nil {
			fmt.Fprintf(os.Stderr, "diskfill: read pass %d: %v\n", pass, err)
			os.Exit(1)
		}
		fmt.Printf("diskfill: read pass %d: %dMiB\n", pass, n/mib)
	}
	if *mmapLoop {
		if err := touchLoop(path, written, stop); err != nil {
			fmt.Fprintf(os.Stderr, "diskfill: mmap loop: %v\n", err)
			os.Exit(1)
		}
		return
	}
	fmt.Printf("diskfill: holding %dMiB after %s\n", written/mib, time.Since(start).Round(time.Millisecond))
	sig := <-stop
	fmt.Printf("diskfill: %v, exiting\n", sig)
}

// readBack reads the file through once with buf, returning the bytes read.
func readBack(path string, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// touchLoop maps size bytes of path and reads one byte of each page in turn until stop,
// printing the pages touched every 5 s.
func touchLoop(path string, size int64, stop <-chan os.Signal) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(data)
	page := os.Getpagesize()
	fmt.Printf("diskfill: mmap loop over %dMiB (%d pages)\n", size/mib, len(data)/page)
	var sum byte
	var touched, laps int64
	report := time.Now().Add(5 * time.Second)
	for {
		for off := 0; off < len(data); off += page {
			sum += data[off]
			touched++
			if touched%64 != 0 {
				continue
			}
			select {
			case sig := <-stop:
				fmt.Printf("diskfill: %v after %d laps, exiting (%d)\n", sig, laps, sum)
				return nil
			default:
			}
			if now := time.Now(); now.After(report) {
				fmt.Printf("diskfill: mmap loop: %d pages touched in the last 5s, lap %d\n", touched, laps)
				touched, report = 0, now.Add(5*time.Second)
			}
		}
		laps++
	}
}
