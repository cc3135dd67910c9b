package core

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
)

// heartbeats returns n distinct heartbeat payloads from leader of term 1.
func heartbeats(leader string, n int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(`{"type":"heartbeat","group":"g","from":"` + leader + `","leader":"` + leader +
			`","priority":7,"term":1,"seq":` + strconv.Itoa(i+2) + `}`)
	}
	return ps
}

// BenchmarkStepHeartbeat is the steady state: a follower of a 5-member group
// receives one heartbeat (JSON decode included), acks it and re-arms its
// timer. Target: ≤ 2 µs per heartbeat.
func BenchmarkStepHeartbeat(b *testing.B) {
	n := newTestNet(b, ModeQuorum, "a", "b", "c", "d", "e")
	n.quiet = true
	n.advance(3000, 10)
	leader := n.status("a").Leader
	follower := "a"
	if leader == "a" {
		follower = "b"
	}
	e := n.nodes[follower]
	payloads := heartbeats(leader, 1024)
	in := Input{Now: n.now, Inbound: make([]Message, 1)}
	var out Output
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in.Inbound[0] = Message{Topic: "election:g", Payload: payloads[i%len(payloads)]}
		in.Now++
		out.Reset()
		e.Step(&in, &out)
	}
	if len(out.Publishes) != 1 {
		b.Fatalf("want one ack, got %+v", out)
	}
}

// BenchmarkElection measures a whole election, from the campaign command to
// every member knowing the leader, over an instant bus (CPU cost only: every
// node's Step for every message of the election, all nodes in this one
// process; on a bus, each node does 1/n of it). Run n=1001 with -benchtime=1x.
func BenchmarkElection(b *testing.B) {
	for _, size := range []int{5, 101, 1001} {
		b.Run(fmt.Sprintf("n=%d", size), func(b *testing.B) {
			ids := make([]string, size)
			for i := range ids {
				ids[i] = fmt.Sprintf("n%04d", i)
			}
			var msgs int
			for b.Loop() {
				b.StopTimer()
				n := newTestNet(b, ModeQuorum, ids...)
				n.quiet = true
				n.take()
				b.StartTimer()
				n.step(ids[0], &Input{Now: n.now, Commands: []Command{{Kind: CmdCampaign, Group: "g"}}})
				for len(n.queue) > 0 {
					msgs += len(n.queue)
					n.deliverRound()
				}
				b.StopTimer()
				for _, id := range ids {
					if n.status(id).Leader != ids[0] {
						b.Fatalf("%s follows %q", id, n.status(id).Leader)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(msgs)/float64(b.N), "deliveries/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/delivery")
		})
	}
}

// manyGroups joins count 5-member groups in one engine, a following b.
func manyGroups(tb testing.TB, count int) (*Engine, []string) {
	e := NewEngine()
	members := []string{"a", "b", "c", "d", "e"}
	in := Input{Now: 1}
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("group-%05d", i)
		in.Join = append(in.Join, GroupSpec{Config: Config{ID: "a", Group: names[i], Members: members}})
	}
	var out Output
	e.Step(&in, &out)
	if len(e.Groups()) != count {
		tb.Fatalf("joined %d groups of %d", len(e.Groups()), count)
	}
	return e, names
}

// heartbeatsFromB is a heartbeat of leader b, term 1, for each group named.
func heartbeatsFromB(names []string) []Message {
	payloads := make([]Message, len(names))
	for i, name := range names {
		payloads[i] = Message{Topic: Topic(name), Payload: []byte(`{"type":"heartbeat","group":"` + name +
			`","from":"b","leader":"b","priority":7,"term":1,"seq":2}`)}
	}
	return payloads
}

// BenchmarkManyGroups steps a heartbeat into one of 10,000 groups hosted by
// one engine: routing and timers must not cost per group.
func BenchmarkManyGroups(b *testing.B) {
	const count = 10_000
	e, names := manyGroups(b, count)
	payloads := heartbeatsFromB(names)
	in := Input{Now: 2, Inbound: make([]Message, 1)}
	var out Output
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// Time stands still: this measures routing and timer upkeep, not
		// the elections that 10,000 leaderless groups would start.
		in.Inbound[0] = payloads[i%count]
		out.Reset()
		e.Step(&in, &out)
	}
}

// TestMemoryPerGroup checks the state a 5-member group costs in an engine
// hosting 10,000 of them: at most 2 KiB each.
func TestMemoryPerGroup(t *testing.T) {
	const count = 10_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, _ := manyGroups(t, count)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perGroup := (after.HeapAlloc - before.HeapAlloc) / count
	t.Logf("%d bytes per 5-member group (%d groups)", perGroup, count)
	if perGroup > 2048 {
		t.Errorf("%d bytes per 5-member group, want ≤ 2048", perGroup)
	}
	runtime.KeepAlive(e)
}

// BenchmarkManyGroupsFollowing is BenchmarkManyGroups with time moving:
// each of 10,000 groups hears its leader's heartbeat every 500 ms (one
// heartbeat per op, a millisecond every 20 ops), so every heartbeat pushes
// the group's election timer later, as in a settled swarm.
func BenchmarkManyGroupsFollowing(b *testing.B) {
	const count = 10_000
	e, names := manyGroups(b, count)
	payloads := heartbeatsFromB(names)
	in := Input{Now: 2, Inbound: make([]Message, 1)}
	var out Output
	for i := range count { // every group follows b from here on
		in.Inbound[0] = payloads[i]
		out.Reset()
		e.Step(&in, &out)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%20 == 0 {
			in.Now++
		}
		in.Inbound[0] = payloads[i%count]
		out.Reset()
		e.Step(&in, &out)
	}
	if st, _ := e.Status(names[0]); st.Leader != "b" {
		b.Fatalf("group-00000 follows %q", st.Leader)
	}
}
