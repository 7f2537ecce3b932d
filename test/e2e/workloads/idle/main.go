// Command idle does nothing until it is told to stop: the bystander pod of the end-to-end
// scenarios. As PID 1 of a container it must handle SIGTERM itself (the kernel does not apply
// a default action to PID 1), so it exits at once and pod deletions take no grace period.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("idle: running")
	sig := <-stop
	fmt.Printf("idle: %v, exiting\n", sig)
}
