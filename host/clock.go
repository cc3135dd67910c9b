package host

import "time"

// Clock is the monotonic millisecond clock an agent hands the core
// (AgentConfig.Clock). Only differences between readings are meaningful; it
// never goes backwards.
type Clock interface {
	NowMs() int64
}

// NewRealClock returns a Clock reading 0 now and counting up in real time.
// It reads Go's monotonic clock: wall-clock jumps do not affect it.
func NewRealClock() Clock { return realClock{start: time.Now()} }

type realClock struct{ start time.Time }

func (c realClock) NowMs() int64 { return time.Since(c.start).Milliseconds() }
