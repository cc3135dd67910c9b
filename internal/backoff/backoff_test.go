package backoff

import (
	"math"
	"testing"
	"time"
)

// checkSequence runs Next n times and checks every delay lies in [c/2, c] for the
// expected ceiling c, which doubles from lo and stops at hi.
func checkSequence(t *testing.T, b *Backoff, lo, hi time.Duration, n int) {
	t.Helper()
	c := lo
	for i := range n {
		d := b.Next()
		if d < c/2 || d > c {
			t.Fatalf("delay %d: %v outside [%v, %v]", i, d, c/2, c)
		}
		if c > hi-c { // c*2 > hi, written so that it cannot overflow
			c = hi
		} else {
			c *= 2
		}
	}
}

func TestDoublesToMaxAndResets(t *testing.T) {
	b := New(100*time.Millisecond, 3*time.Second)
	checkSequence(t, b, 100*time.Millisecond, 3*time.Second, 12)
	b.Reset()
	checkSequence(t, b, 100*time.Millisecond, 3*time.Second, 3)
}

func TestBoundsOfOptions(t *testing.T) {
	// A zero min would never grow: it becomes 1 ms.
	checkSequence(t, New(0, time.Second), time.Millisecond, time.Second, 15)
	// A max below min is min: constant ceiling.
	checkSequence(t, New(time.Second, time.Millisecond), time.Second, time.Second, 5)
	// Doubling near the largest duration must not overflow.
	huge := time.Duration(math.MaxInt64)
	checkSequence(t, New(huge/4, huge), huge/4, huge, 6)
}

func TestJitterSpreads(t *testing.T) {
	// Two nodes that failed together must not retry in step: delays at one
	// ceiling differ, and cover both halves of [c/2, c].
	const c = time.Second
	low, high := 0, 0
	for range 200 {
		d := New(c, c).Next()
		if d < 3*c/4 {
			low++
		} else {
			high++
		}
	}
	if low == 0 || high == 0 {
		t.Fatalf("200 delays at ceiling %v: %d in the lower half, %d in the upper", c, low, high)
	}
}
