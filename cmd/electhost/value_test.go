package main

import (
	"testing"

	"github.com/electcore/electcore/transport"
)

// The passive listener keeps the newest version of the leader's value in
// the leader's term: a late heartbeat does not roll it back, and a new
// leader's term forgets it until that leader's value arrives.
func TestObserverValue(t *testing.T) {
	o := newObserver("g")
	var seen []watchEvent
	o.onLeader = func(leader string, term uint64, value, lost string) {
		seen = append(seen, watchEvent{Leader: leader, Term: term, Value: value, Lost: lost})
	}
	for _, p := range []string{
		`{"type":"leader","group":"g","from":"a","leader":"a","term":3,"seq":1,"value_ver":1,"value":"v1"}`,
		`{"type":"heartbeat","group":"g","from":"a","leader":"a","term":3,"seq":3,"value_ver":2,"value":"v2"}`,
		`{"type":"heartbeat","group":"g","from":"a","leader":"a","term":3,"seq":2,"value_ver":1,"value":"v1"}`,
		`{"type":"heartbeat","group":"g","from":"a","leader":"a","term":3,"seq":4,"value_ver":2,"value":"v2"}`,
		`{"type":"leader","group":"g","from":"b","leader":"b","term":4,"seq":1}`,
	} {
		o.deliver(transport.Message{Payload: []byte(p)})
	}
	want := []watchEvent{{Leader: "a", Term: 3, Value: "v1"}, {Leader: "a", Term: 3, Value: "v2"}, {Leader: "b", Term: 4}}
	if len(seen) != len(want) {
		t.Fatalf("changes %+v, want %+v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("change %d: %+v, want %+v", i, seen[i], want[i])
		}
	}
	if rep := o.report(0); rep.Value != "" || rep.Leader != "b" {
		t.Fatalf("report %+v", rep)
	}
}
