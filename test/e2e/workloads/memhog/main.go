// Command memhog allocates anonymous memory at a steady rate, every page resident (and
// charged to its memory cgroup), then holds it until stopped. It is the pressure
// source of the memory scenarios and of bench-ramp.
//
//	memhog -rate-mib=400 -target-mib=3000
//
// Memory comes from mmap, not the Go heap, so the garbage collector neither adds to nor
// delays the ramp. Progress lines on stdout give the allocated size and the elapsed time.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const (
	mib      = 1 << 20
	pageSize = 4096
	// step is how often the ramp allocates; short enough that a 4000 MiB/s ramp is smooth
	// (40 MiB per step), long enough that the loop's own cost is negligible.
	step = 10 * time.Millisecond
	// maxChunk bounds one mmap call.
	maxChunk = 16 << 20
)

func main() {
	rateMiB := flag.Float64("rate-mib", 100, "allocation rate in MiB per second (> 0)")
	targetMiB := flag.Int64("target-mib", 0, "stop allocating at this size in MiB and hold; 0 = no limit")
	startDelay := flag.Duration("start-delay", 0, "wait this long before the ramp starts")
	reportEvery := flag.Duration("report-every", time.Second, "interval of progress lines")
	ignoreTerm := flag.Bool("ignore-sigterm", false, "ignore SIGTERM (a program slow to shut down: only SIGKILL stops it)")
	flag.Parse()
	if *rateMiB <= 0 {
		fmt.Fprintf(os.Stderr, "memhog: -rate-mib=%v: must be above 0\n", *rateMiB)
		os.Exit(2)
	}
	if *targetMiB < 0 {
		fmt.Fprintf(os.Stderr, "memhog: -target-mib=%d: must be 0 (no limit) or above\n", *targetMiB)
		os.Exit(2)
	}

	stop := make(chan os.Signal, 1)
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(stop, syscall.SIGINT)
	} else {
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	}
	select {
	case sig := <-stop:
		fmt.Printf("memhog: %v before the ramp, exiting\n", sig)
		return
	case <-time.After(*startDelay):
	}

	fmt.Printf("memhog: ramp start rate=%.0fMiB/s target=%dMiB\n", *rateMiB, *targetMiB)
	var (
		allocated int64
		start     = time.Now()
		lastShown = start
		ticker    = time.NewTicker(step)
	)
	defer ticker.Stop()
	for {
		select {
		case sig := <-stop:
			fmt.Printf("memhog: %v at %dMiB after %s, exiting\n", sig, allocated/mib, time.Since(start).Round(time.Millisecond))
			return
		case now := <-ticker.C:
			want := int64(*rateMiB * mib * now.Sub(start).Seconds())
			if *targetMiB > 0 && want > *targetMiB*mib {
				want = *targetMiB * mib
			}
			for grow := want - allocated; grow >= pageSize; grow = want - allocated {
				// At most maxChunk per call: behind schedule, one call for the whole
				// deficit would spend hundreds of milliseconds inside the kernel, where
				// neither the cgroup freezer nor anything but a fatal signal stops it;
				// real allocators grow in chunks and return to user space in between.
				grow = min(grow-grow%pageSize, maxChunk)
				// MAP_POPULATE faults every page in inside the kernel, several times faster
				// than touching them from here: without it no ramp above ~500 MiB/s is
				// reachable on a small VM.
				// The mapping stays until the process exits: nothing unmaps it.
				_, err := syscall.Mmap(-1, 0, int(grow), syscall.PROT_READ|syscall.PROT_WRITE,
					syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_POPULATE)
				if err != nil {
					fmt.Fprintf(os.Stderr, "memhog: mmap %d bytes at %dMiB: %v\n", grow, allocated/mib, err)
					os.Exit(1)
				}
				allocated += grow
			}
			if now.Sub(lastShown) >= *reportEvery {
				lastShown = now
				fmt.Printf("memhog: allocated=%dMiB elapsed=%s\n", allocated/mib, now.Sub(start).Round(time.Millisecond))
			}
		}
	}
}
