package core

import (
	"strconv"
	"testing"
)

// admissionNet is three engines in n groups, each admitting at most max
// campaign rounds at a time; a message published in one 10 ms step is
// delivered in the next.
type admissionNet struct {
	ids     []string
	engines map[string]*Engine
	pending []Message
	now     int64
}

func newAdmissionNet(t *testing.T, n, max int) *admissionNet {
	t.Helper()
	net := &admissionNet{ids: []string{"a", "b", "c"}, engines: map[string]*Engine{}, now: 1}
	for i, id := range net.ids {
		e := NewEngine()
		e.maxCampaigns = max
		joinCohort(t, e, id, uint32(3-i), 0, n, net.now)
		net.engines[id] = e
	}
	return net
}

// step advances 10 ms and returns, per engine, how many of its groups are
// campaigning (pre-candidate or candidate) after it.
func (net *admissionNet) step(t *testing.T, n int) map[string]int {
	t.Helper()
	net.now += 10
	var next []Message
	busy := map[string]int{}
	for _, id := range net.ids {
		var out Output
		e := net.engines[id]
		e.Step(&Input{Now: net.now, Inbound: net.pending}, &out)
		next = append(next, out.Publishes...)
		for i := range n {
			st, _ := e.Status("g-" + strconv.Itoa(i))
			if st.Role == RolePreCandidate || st.Role == RoleCandidate {
				busy[id]++
			}
		}
	}
	net.pending = next
	return busy
}

// led counts the groups with a leader every engine knows.
func (net *admissionNet) led(n int) int {
	led := 0
	for i := range n {
		leader := ""
		for j, id := range net.ids {
			st, _ := net.engines[id].Status("g-" + strconv.Itoa(i))
			if j == 0 {
				leader = st.Leader
			} else if st.Leader != leader {
				leader = ""
			}
		}
		if leader != "" {
			led++
		}
	}
	return led
}

// An engine whose timers start more campaigns than it admits runs them a
// few at a time, in order, each slot freed as soon as its round ends:
// 48 groups joined together by three engines that admit four rounds
// each are all led, and known by all, within three election timeouts of
// the join (a first election can split its votes), and no engine ever has
// more than four of its groups campaigning.
func TestCampaignAdmissionBoundsRoundsInFlight(t *testing.T) {
	const n, max = 48, 4
	net := newAdmissionNet(t, n, max)
	et := int64(DefaultElectionTimeoutMs)
	for net.led(n) < n {
		if net.now > 3*et {
			t.Fatalf("%d of %d groups led and known by all at %d ms, three election timeouts after the join", net.led(n), n, net.now)
		}
		for id, k := range net.step(t, n) {
			if k > max {
				t.Fatalf("at %d ms %s had %d groups campaigning, more than the %d it admits", net.now, id, k, max)
			}
		}
	}
}

// A round that cannot be won holds its slot one election timeout at most,
// and a retry waits behind the campaigns already waiting: an engine whose
// peers never answer, in six groups with two slots, starts a campaign in
// every group within three election timeouts, in turn, not only in the
// first two again and again.
func TestCampaignAdmissionRoundsEndInTurn(t *testing.T) {
	const n, max = 6, 2
	e := NewEngine()
	e.maxCampaigns = max
	joinCohort(t, e, "a", 3, 0, n, 1)
	et := int64(DefaultElectionTimeoutMs)
	for now := int64(1); now < 4*et; now += 10 {
		var out Output
		e.Step(&Input{Now: now}, &out)
	}
	for i := range n {
		st, _ := e.Status("g-" + strconv.Itoa(i))
		if st.Elections == 0 {
			t.Errorf("g-%d never campaigned in %d election timeouts", i, 4)
		}
	}
}
