package core

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// A follower's election timer moves later with every heartbeat. Under
// random heartbeats, elections and silences in many groups the engine
// wakes the host for the earliest timer (WakeAt is the earliest wake of
// any group) and keeps its timer heap in order.
func TestTimersEarliestComesFirst(t *testing.T) {
	const groups = 300
	e := NewEngine()
	rng := rand.New(rand.NewPCG(7, 11))
	joinCohort(t, e, "b", 0, 0, groups, 1)
	// Leaders a and c send heartbeats of increasing terms, each to some
	// of the groups, at random times; some groups hear nothing and
	// campaign.
	now := int64(1)
	wakeAt := int64(0)
	for step := range 3000 {
		now += 1 + rng.Int64N(120)
		if wakeAt > 0 && rng.IntN(3) == 0 {
			now = max(now, wakeAt) // the host wakes at WakeAt too
		}
		in := Input{Now: now}
		for range rng.IntN(40) {
			g := rng.IntN(groups)
			leader := []string{"a", "c"}[rng.IntN(2)]
			term := 1 + uint64(step/500)
			in.Inbound = append(in.Inbound, Message{Topic: Topic("g-" + strconv.Itoa(g)), Payload: []byte(
				`{"type":"heartbeat","group":"g-` + strconv.Itoa(g) + `","from":"` + leader + `","leader":"` + leader +
					`","priority":7,"term":` + strconv.FormatUint(term, 10) + `,"seq":` + strconv.Itoa(step) + `}`)})
		}
		var out Output
		e.Step(&in, &out)
		wakeAt = out.WakeAt
		earliest := int64(0)
		for i, g := range e.timers {
			if i > 0 && e.timers.Less(i, (i-1)/2) {
				t.Fatalf("step %d: heap out of order at %d", step, i)
			}
			if g.wake != waitingWake && (earliest == 0 || g.wake < earliest) {
				earliest = g.wake
			}
		}
		if len(e.waiting) == 0 && out.WakeAt != earliest {
			t.Fatalf("step %d: WakeAt %d, but the earliest wake is %d", step, out.WakeAt, earliest)
		}
	}
}
