package hostfuncs

import (
	"sync"
	"time"
)

// Clock is the monotonic millisecond clock handed to the core. Only
// differences between readings are meaningful; it never goes backwards.
type Clock interface {
	NowMs() int64
}

// RealClock reads Go's monotonic clock: milliseconds since it was created.
// Wall-clock jumps do not affect it.
type RealClock struct{ start time.Time }

// NewRealClock returns a Clock reading 0 now and counting up in real time.
func NewRealClock() *RealClock { return &RealClock{start: time.Now()} }

// NowMs returns the milliseconds elapsed since NewRealClock.
func (c *RealClock) NowMs() int64 { return time.Since(c.start).Milliseconds() }

// ManualClock is a Clock for tests that moves only when told to. It is safe
// for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now int64
}

// NewManualClock returns a ManualClock reading startMs.
func NewManualClock(startMs int64) *ManualClock { return &ManualClock{now: startMs} }

// NowMs returns the current reading.
func (c *ManualClock) NowMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (negative durations are ignored: the
// clock is monotonic) and returns the new reading.
func (c *ManualClock) Advance(d time.Duration) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now += d.Milliseconds()
	}
	return c.now
}

// Set moves the clock to ms if that is not in the past, and returns the reading.
func (c *ManualClock) Set(ms int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ms > c.now {
		c.now = ms
	}
	return c.now
}
