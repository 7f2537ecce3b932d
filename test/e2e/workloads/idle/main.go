// Command idle does nothing until it is told to stop: the bystander pod of the end-to-end
// scenarios (with -burn, a busy pod that keeps CPUs taken). As PID 1 of a container it must handle SIGTERM itself (the kernel does not apply
// a default action to PID 1), so it exits at once and pod deletions take no grace period.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// -burn=N: N threads spinning on the CPU until the end, the busy node's burner pods.
	burn := flag.Int("burn", 0, "threads to keep busy on the CPU")
	flag.Parse()
	for range *burn {
		go func() {
			for n := uint64(0); ; n++ {
				_ = n
			}
		}()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("idle: running")
	sig := <-stop
	fmt.Printf("idle: %v, exiting\n", sig)
}
