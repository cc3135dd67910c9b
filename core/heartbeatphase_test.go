package core

import (
	"bytes"
	"strconv"
	"testing"
)

// An engine leading many groups elected at different times beats them in
// one phase: once a heartbeat is due, every other quorum leader's due within
// half an interval goes in the same step (heartbeatEarly), so after the
// first interval the host steps once per interval for all of them, not
// once per election it happened to win. No group's heartbeats are ever
// further apart than an interval, nor closer than half of one.
func TestHeartbeatsShareOnePhase(t *testing.T) {
	const groups, hb = 40, 500
	e := NewEngine()
	sent := map[string][]int64{} // group → its heartbeats' send times
	beatSteps := map[int64]bool{}
	step := func(in *Input) int64 {
		var out Output
		e.Step(in, &out)
		for _, m := range out.Publishes {
			if !bytes.HasPrefix(m.Payload, []byte(`{"type":"heartbeat",`)) && !bytes.HasPrefix(m.Payload, []byte(`{"type":"leader",`)) {
				continue
			}
			sent[m.Topic] = append(sent[m.Topic], in.Now)
			beatSteps[in.Now] = true
		}
		for _, ev := range out.Events {
			if ev.Kind == EventRejected {
				t.Fatalf("refused: %s", ev.Reason)
			}
		}
		return out.WakeAt
	}
	// Groups of one member joined 37 ms apart: each elects itself at its
	// own time, so their heartbeats start in 40 phases.
	now, wake := int64(1), int64(0)
	for i := range groups {
		now = 1 + int64(i)*37
		for wake > 0 && wake < now {
			wake = step(&Input{Now: wake})
		}
		wake = step(&Input{Now: now, Join: []GroupSpec{{Config: Config{ID: "a", Group: "g-" + strconv.Itoa(i), Members: []string{"a"}, HeartbeatMs: hb}}}})
	}
	const end = 20_000
	for wake > 0 && wake <= end {
		wake = step(&Input{Now: wake})
	}
	if len(sent) != groups {
		t.Fatalf("%d of %d groups sent heartbeats", len(sent), groups)
	}
	for topic, at := range sent {
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap > hb || gap < hb/2 {
				t.Fatalf("%s: heartbeats at %d and %d, %d ms apart (want %d..%d)", topic, at[i-1], at[i], gap, hb/2, hb)
			}
		}
		if last := at[len(at)-1]; last < end-hb {
			t.Fatalf("%s: last heartbeat at %d, before %d", topic, last, end-hb)
		}
	}
	// The last 5 s: one step per interval carries every heartbeat.
	n := 0
	for at := range beatSteps {
		if at > end-5_000 {
			n++
		}
	}
	if n > 5_000/hb+1 {
		t.Fatalf("in the last 5 s heartbeats went out in %d steps, want at most %d (one phase)", n, 5_000/hb+1)
	}
}
