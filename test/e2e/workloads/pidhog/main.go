// Command pidhog holds many threads or processes, each blocked forever, until stopped: the
// pressure source of the PID scenario. Both count against pid_max and the pids cgroup.
//
//	pidhog -mode=processes -count=2000 -rate=500
//
// Processes are copies of this binary started with -child, which only wait to be killed;
// they share the parent's process group, so the container's stop takes them all.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "threads", "what to hold: threads or processes")
	count := flag.Int("count", 1000, "how many threads or processes to hold (> 0)")
	rate := flag.Float64("rate", 1000, "how many to start per second (> 0)")
	child := flag.Bool("child", false, "internal: run as a held child process")
	flag.Parse()
	if *child {
		select {} // killed with the container
	}
	if *mode != "threads" && *mode != "processes" {
		fmt.Fprintf(os.Stderr, "pidhog: -mode=%q: must be threads or processes\n", *mode)
		os.Exit(2)
	}
	if *count <= 0 || *rate <= 0 {
		fmt.Fprintf(os.Stderr, "pidhog: -count=%d -rate=%v: both must be above 0\n", *count, *rate)
		os.Exit(2)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pidhog: finding own executable: %v\n", err)
		os.Exit(1)
	}

	var children []*exec.Cmd
	interval := time.Duration(float64(time.Second) / *rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	start := time.Now()
	held := 0
	fmt.Printf("pidhog: start mode=%s count=%d rate=%.0f/s\n", *mode, *count, *rate)
	for held < *count {
		select {
		case sig := <-stop:
			fmt.Printf("pidhog: %v with %d %s held, exiting\n", sig, held, *mode)
			killAll(children)
			return
		case <-ticker.C:
		}
		switch *mode {
		case "threads":
			started := make(chan struct{})
			go func() {
				// A goroutine locked to its thread and blocked keeps that OS thread for itself.
				runtime.LockOSThread()
				close(started)
				select {}
			}()
			<-started
		case "processes":
			cmd := exec.Command(self, "-child")
			if err := cmd.Start(); err != nil {
				fmt.Fprintf(os.Stderr, "pidhog: starting process %d: %v (holding %d)\n", held+1, err, held)
				continue
			}
			children = append(children, cmd)
		}
		held++
		if held%100 == 0 {
			fmt.Printf("pidhog: held=%d elapsed=%s\n", held, time.Since(start).Round(time.Millisecond))
		}
	}
	fmt.Printf("pidhog: holding %d %s\n", held, *mode)
	sig := <-stop
	fmt.Printf("pidhog: %v, exiting\n", sig)
	killAll(children)
}

func killAll(children []*exec.Cmd) {
	for _, c := range children {
		_ = c.Process.Kill()
	}
}
