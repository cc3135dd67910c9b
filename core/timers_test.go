package core

import (
	"container/heap"
	"math/rand/v2"
	"slices"
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
			if i > 0 && wakesBefore(g, e.timers[(i-1)/2]) {
				t.Fatalf("step %d: heap out of order at %d", step, i)
			}
			if g.heapIdx != i {
				t.Fatalf("step %d: the group at %d records index %d", step, i, g.heapIdx)
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

// refTimers is the timer heap through container/heap, as it was.
type refTimers []*group

func (h refTimers) Len() int           { return len(h) }
func (h refTimers) Less(i, j int) bool { return wakesBefore(h[i], h[j]) }
func (h refTimers) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refTimers) Push(x any)        { *h = append(*h, x.(*group)) }
func (h *refTimers) Pop() any {
	g := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return g
}

// The timer heap moves its groups exactly as container/heap would: the
// order of groups due together (dueTimers walks the heap's layout) and so
// every output stays what it was. Many equal wakes, as a settled swarm's
// aligned steps give, exercise the tie on topics.
func TestTimerHeapMovesAsContainerHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var h timerHeap
	var ref refTimers
	refOf := map[*group]*group{} // h's group → ref's copy
	for op := range 6000 {
		switch k := rng.IntN(10); {
		case k < 4 || len(h) == 0:
			g := &group{wake: rng.Int64N(50), topic: "g-" + strconv.Itoa(op)}
			c := *g
			refOf[g] = &c
			h.push(g)
			heap.Push(&ref, &c)
		case k < 6:
			i := rng.IntN(len(h))
			c := refOf[h[i]]
			delete(refOf, h[i])
			h.remove(i)
			heap.Remove(&ref, slices.Index(ref, c))
		default:
			i := rng.IntN(len(h))
			w := rng.Int64N(50)
			h[i].wake = w
			c := refOf[h[i]]
			c.wake = w
			h.fix(i)
			heap.Fix(&ref, slices.Index(ref, c))
		}
		for i, g := range h {
			if refOf[g] != ref[i] || g.heapIdx != i {
				t.Fatalf("op %d: position %d holds %s (index %d), container/heap has %s there", op, i, g.topic, g.heapIdx, ref[i].topic)
			}
		}
	}
}
