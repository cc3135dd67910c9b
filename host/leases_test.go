package host

import "testing"

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
	if got := q.next(); got != 0 || q.Len() != 0 {
		t.Fatalf("next = %d with %d entries left, want an empty queue", got, q.Len())
	}
}
