package host

import "time"

// Clock is the monotonic millisecond clock an agent hands the core
// (AgentConfig.Clock). Only differences between readings are meaningful; it
// never goes backwards.
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
