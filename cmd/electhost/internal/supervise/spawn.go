package supervise

import (
	"runtime"
	"sync"
)

// Processes are started from one goroutine locked to its OS thread for the
// life of the process: Linux's PR_SET_PDEATHSIG fires when the thread that
// forked the child ends, and a Go program may end a thread (a goroutine
// that exits while locked to it) while the process lives on.
var spawner struct {
	once sync.Once
	reqs chan func()
}

func spawnLoop() {
	runtime.LockOSThread() // never unlocked: this thread lives as long as the process
	for f := range spawner.reqs {
		f()
	}
}

// onSpawnThread runs start on the spawning thread and returns its error.
func onSpawnThread(start func() error) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go spawnLoop()
	})
	done := make(chan error, 1)
	spawner.reqs <- func() { done <- start() }
	return <-done
}
