package fuel

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in ns (the caller locks its
// goroutine to the thread).
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
