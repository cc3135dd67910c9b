package host

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The lease queue gives the earliest lease still held, drops the entries a
// renewal or a lost leadership made stale, and ends only live leases.
func TestLeaseQueue(t *testing.T) {
	var q leaseQueue
	a := &Election{leading: true}
	b := &Election{leading: true}
	lease := func(e *Election, until int64) { e.leaseUntil = until; q.track(e, until) }
	lease(a, 100)
	lease(b, 150)
	if got := q.next(); got != 100 {
		t.Fatalf("next = %d, want 100", got)
	}
	lease(a, 200) // renewed: the entry at 100 is stale
	if got := q.next(); got != 150 {
		t.Fatalf("next after a's renewal = %d, want 150", got)
	}
	b.leading = false // lost before its lease ended
	if got := q.next(); got != 200 {
		t.Fatalf("next after b stopped leading = %d, want 200", got)
	}
	if got := q.expired(199); len(got) != 0 {
		t.Fatalf("expired(199) = %v, want none", got)
	}
	if got := q.expired(200); len(got) != 1 || got[0] != a {
		t.Fatalf("expired(200) = %v, want a", got)
	}
	if got := q.next(); got != 0 || len(q) != 0 {
		t.Fatalf("next = %d with %d entries left, want an empty queue", got, len(q))
	}
}

// The queue hands out lease ends in order, whatever order they were
// tracked in and however pops and pushes interleave.
func TestLeaseQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q leaseQueue
	var want []int64
	for round := range 2000 {
		if round%3 != 2 || len(want) == 0 {
			until := 1 + rng.Int64N(500)
			q.track(&Election{leading: true, leaseUntil: until}, until)
			want = append(want, until)
			continue
		}
		slices.Sort(want)
		if got := q.pop().until; got != want[0] {
			t.Fatalf("round %d: popped %d, want %d", round, got, want[0])
		}
		want = want[1:]
	}
	slices.Sort(want)
	for _, w := range want {
		if got := q.pop().until; got != w {
			t.Fatalf("draining: popped %d, want %d", got, w)
		}
	}
}
