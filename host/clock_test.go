package host

import (
	"testing"
	"time"
)

func TestRealClock(t *testing.T) {
	r := NewRealClock()
	a := r.NowMs()
	time.Sleep(2 * time.Millisecond)
	if b := r.NowMs(); b < a || a < 0 {
		t.Fatalf("real clock went %d -> %d", a, b)
	}
	var _ Clock = r
}
