package proc

import (
	"os/exec"
	"runtime"
	"sync"
)

// StartCmd starts cmd from a thread that lives as long as the test binary.
//
// Pdeathsig is sent when the thread that forked the child exits, not the
// process (see prctl(2), PR_SET_PDEATHSIG, and golang/go#27505). The Go
// runtime ends a thread whenever a goroutine locked to it returns, and
// evictiond does that on purpose: its real-time sentinels never unlock, so
// their threads end with them. A component forked from a runtime thread that
// a daemon under test later locked as its sentinel was SIGKILLed when that
// daemon stopped: kube-apiserver vanished between two tests of the daemon
// tier, and every later test was refused. Forking from one goroutine that is
// locked to its thread and never returns keeps the signal for the test
// binary's own death, which is what it is there for.
func StartCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawns = make(chan spawn)
		go spawner()
	})
	done := make(chan error, 1)
	spawns <- spawn{cmd: cmd, done: done}
	return <-done
}

type spawn struct {
	cmd  *exec.Cmd
	done chan<- error
}

var (
	spawnOnce sync.Once
	spawns    chan spawn
)

func spawner() {
	runtime.LockOSThread() // never unlocked, and this goroutine never returns
	for s := range spawns {
		s.done <- s.cmd.Start()
	}
}
