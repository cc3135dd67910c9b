package host

import (
	"testing"
	"time"
)

// TestRealClock: it starts at 0 and follows real time (a sleep of at least
// 2 ms moves it by at least 2 whole milliseconds).
func TestRealClock(t *testing.T) {
	t0 := time.Now()
	r := NewRealClock()
	a := r.NowMs()
	// Starting at 0: never ahead of the time since it was made (a loaded
	// machine can only make the read later, and the bound with it).
	if since := time.Since(t0).Milliseconds(); a < 0 || a > since {
		t.Fatalf("real clock read %d ms, %d ms after it was made", a, since)
	}
	time.Sleep(2 * time.Millisecond)
	if b := r.NowMs(); b-a < 2 {
		t.Fatalf("real clock went %d -> %d over a 2 ms sleep", a, b)
	}
}
