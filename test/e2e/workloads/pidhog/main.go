// Command pidhog holds many threads or processes, each blocked forever, until stopped: the
// pressure source of the PID scenario. Both count against pid_max and the pids cgroup.
//
//	pidhog -mode=processes -count=2000 -rate=500
//	pidhog -mode=bomb -count=6000          # forks as fast as the kernel allows, at most 6000
//	pidhog -mode=probe -rate=50            # a bystander that forks 50 times a second
//
// Processes are copies of this binary started with -child, which only wait to be killed;
// they share the parent's process group, so the container's stop takes them all.
//
// -mode=bomb is a fork bomb with a hard cap: one process forks children that only pause
// (forkHeld: no exec, no Go code in the child), as fast as fork returns, until -count are
// held; a refused fork (EAGAIN: the pids cgroup's pids.max or pid_max) is retried 1 ms
// later, as a bomb would, and counted. -count bounds it whatever the cgroup limits are.
//
// -mode=probe is a bystander: it forks and execs a child that exits at once, -rate times a
// second, and prints how many forks the kernel refused ("probe: attempts=… refused=…").
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "threads", "what to hold: threads or processes")
	count := flag.Int("count", 1000, "how many threads or processes to hold (> 0)")
	rate := flag.Float64("rate", 1000, "how many to start per second (> 0)")
	child := flag.Bool("child", false, "internal: run as a held child process")
	exit := flag.Bool("exit", false, "internal: exit at once (the probe's child)")
	flag.Parse()
	if *exit {
		return
	}
	if *child {
		select {} // killed with the container
	}
	switch *mode {
	case "threads", "processes":
	case "bomb":
		if *count <= 0 {
			fmt.Fprintf(os.Stderr, "pidhog: -count=%d: must be above 0 (the bomb's hard cap)\n", *count)
			os.Exit(2)
		}
		bomb(*count)
		return
	case "probe":
		if *rate <= 0 {
			fmt.Fprintf(os.Stderr, "pidhog: -rate=%v: must be above 0\n", *rate)
			os.Exit(2)
		}
		probe(*rate)
		return
	default:
		fmt.Fprintf(os.Stderr, "pidhog: -mode=%q: must be threads, processes, bomb or probe\n", *mode)
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

// bomb forks held children as fast as it can, at most count of them, retrying refused forks
// every millisecond, until SIGTERM (then it kills them all) or SIGKILL.
func bomb(count int) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	spareThreads()
	runtime.LockOSThread() // forkHeld changes this thread's signal mask
	all, saved := ^uint64(0), uint64(0)
	var pids []int
	refused := 0
	start := time.Now()
	fmt.Printf("pidhog: bomb start count=%d\n", count)
	for len(pids) < count {
		select {
		case sig := <-stop:
			fmt.Printf("pidhog: bomb %v with %d held, %d forks refused, exiting\n", sig, len(pids), refused)
			killPIDs(pids)
			return
		default:
		}
		pid, errno := forkHeld(&all, &saved)
		if errno != 0 {
			if refused == 0 {
				fmt.Printf("pidhog: bomb first refusal after %d held (%s): %v\n", len(pids), time.Since(start).Round(time.Millisecond), errno)
			}
			refused++
			time.Sleep(time.Millisecond)
			continue
		}
		pids = append(pids, int(pid))
		if len(pids)%500 == 0 {
			fmt.Printf("pidhog: bomb held=%d elapsed=%s refused=%d\n", len(pids), time.Since(start).Round(time.Millisecond), refused)
		}
	}
	fmt.Printf("pidhog: bomb holding %d (cap reached after %s), %d forks refused\n", len(pids), time.Since(start).Round(time.Millisecond), refused)
	sig := <-stop
	fmt.Printf("pidhog: bomb %v, exiting\n", sig)
	killPIDs(pids)
}

// spareThreads makes the Go runtime start its threads before the bomb takes
// every PID: the runtime dies ("failed to create new OS thread") when it needs
// a thread the kernel refuses, and a C bomb's parent would not. Goroutines
// blocked in system calls at once each get a thread; once back, the threads
// stay idle in the runtime's pool for later use.
func spareThreads() {
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.Timespec{Nsec: int64(50 * time.Millisecond)}
			_ = syscall.Nanosleep(&ts, nil)
		}()
	}
	wg.Wait()
}

func killPIDs(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// probe forks and execs a child that exits at once, rate times a second, and reports how
// many forks were refused.
func probe(rate float64) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pidhog: finding own executable: %v\n", err)
		os.Exit(1)
	}
	ticker := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer ticker.Stop()
	report := time.NewTicker(time.Second)
	defer report.Stop()
	attempts, refused, other := 0, 0, 0
	line := func() string {
		return fmt.Sprintf("pidhog: probe: attempts=%d refused=%d other=%d", attempts, refused, other)
	}
	fmt.Println("pidhog: probe start")
	for {
		select {
		case <-stop:
			fmt.Println(line())
			// Also the container's termination message: readable in the pod's status
			// after an eviction, when its log may be gone.
			_ = os.WriteFile("/dev/termination-log", []byte(line()), 0o644)
			return
		case <-report.C:
			fmt.Println(line())
		case <-ticker.C:
			attempts++
			pid, err := syscall.ForkExec(self, []string{self, "-exit"}, nil)
			switch {
			case err == syscall.EAGAIN:
				refused++
			case err != nil:
				other++
			default:
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, 0, nil)
			}
		}
	}
}
