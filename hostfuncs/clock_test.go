package hostfuncs

import (
	"testing"
	"time"
)

func TestClocks(t *testing.T) {
	r := NewRealClock()
	a := r.NowMs()
	time.Sleep(2 * time.Millisecond)
	if b := r.NowMs(); b < a || a < 0 {
		t.Fatalf("real clock went %d -> %d", a, b)
	}
	m := NewManualClock(100)
	if m.Advance(1500*time.Millisecond) != 1600 || m.Advance(-time.Hour) != 1600 || m.Set(10) != 1600 || m.Set(2000) != 2000 || m.NowMs() != 2000 {
		t.Fatal("manual clock")
	}
	var _ Clock = r
	var _ Clock = m
}
