package host

import "testing"

// Election.Leader, kept from the core's events, says what Status says of
// the leader at every step: from the joins (none known) through the
// elections and hand-offs, and, alone, through its leaders' step-downs.
func TestLeaderAgreesWithStatus(t *testing.T) {
	s := newSteadySwarm(t, 20, nil)
	check := func(from int) (unknown int) {
		t.Helper()
		for i := from; i < len(s.els); i++ {
			for _, el := range s.els[i] {
				st := el.Status()
				id, term := el.Leader()
				if id != st.Leader || term != st.Term {
					t.Fatalf("%s at %s: Leader() = %q, %d; Status: %q, %d", st.Group, st.ID, id, term, st.Leader, st.Term)
				}
				if id == "" {
					unknown++
				}
			}
		}
		return unknown
	}
	if check(0) != 60 {
		t.Fatal("a leader known before any step")
	}
	for !s.settled() {
		s.tick(20)
		check(0)
	}
	// b and c stop: a, alone, loses its leases and steps down, and then
	// knows no leader of those groups.
	all := s.agents
	t.Cleanup(func() { s.agents = all }) // closed with the others
	s.agents = s.agents[:1]
	unknown := 0
	for range 250 {
		s.tick(20)
		unknown = check(0)
	}
	if unknown == 0 {
		t.Fatal("a still knows a leader of every group, alone for 5 s")
	}
}
