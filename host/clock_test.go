package host

import (
	"testing"
	"time"
)

// TestRealClock: it starts at 0 and follows real time (a sleep of at least
// 2 ms moves it by at least 2 whole milliseconds).
func TestRealClock(t *testing.T) {
	r := NewRealClock()
	a := r.NowMs()
	time.Sleep(2 * time.Millisecond)
	if b := r.NowMs(); a < 0 || a > 1000 || b-a < 2 {
		t.Fatalf("real clock went %d -> %d over a 2 ms sleep", a, b)
	}
}
