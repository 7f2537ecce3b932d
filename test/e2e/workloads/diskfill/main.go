// Command diskfill writes a file at a steady rate up to a target size and holds it until
// stopped: the pressure source of the disk scenario, pointed at an emptyDir mount.
//
//	diskfill -dir=/scratch -rate-mib=200 -target-mib=2048
//
// Data is written with write(2) and flushed every step, so the filesystem's free space
// (what statfs and the disk signals see) drops as the file grows, not later.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

const (
	mib  = 1 << 20
	step = 50 * time.Millisecond
)

func main() {
	dir := flag.String("dir", "/scratch", "directory to fill (an emptyDir mount)")
	rateMiB := flag.Float64("rate-mib", 100, "write rate in MiB per second (> 0)")
	targetMiB := flag.Int64("target-mib", 1024, "stop writing at this size in MiB and hold (> 0)")
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
	fmt.Printf("diskfill: holding %dMiB after %s\n", written/mib, time.Since(start).Round(time.Millisecond))
	sig := <-stop
	fmt.Printf("diskfill: %v, exiting\n", sig)
}
