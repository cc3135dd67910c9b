// Package backoff is the one jittered exponential back-off of electcore's
// retry loops: pilot subscriptions and publishes (transport) and the
// leader-only command (cmd/electhost/internal/supervise). NATS reconnects use nats.go's
// own (ReconnectWait/ReconnectJitter).
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff hands out retry delays. The ceiling starts at Min and doubles with
// every Next up to Max; each delay is drawn uniformly from [ceiling/2,
// ceiling], so that retries of many nodes that failed together spread out
// instead of hitting a broker in step. Reset goes back to Min after a
// success. Not safe for concurrent use; the zero value is not usable: use New.
type Backoff struct {
	min, max, ceiling time.Duration
}

// New returns a Backoff from lo to hi. A lo below 1 ms is 1 ms; a hi below
// lo is lo.
func New(lo, hi time.Duration) *Backoff {
	lo = max(lo, time.Millisecond)
	return &Backoff{min: lo, max: max(hi, lo), ceiling: lo}
}

// Next returns the delay before the next retry and doubles the ceiling.
func (b *Backoff) Next() time.Duration {
	c := b.ceiling
	if c > b.max/2 {
		b.ceiling = b.max
	} else {
		b.ceiling = 2 * c
	}
	return c/2 + rand.N(c/2+1)
}

// Reset makes the next delay one from the first step again (the retried
// thing worked).
func (b *Backoff) Reset() { b.ceiling = b.min }
