package core

import (
	"errors"
	"strings"
	"testing"
)

// TestDriverOrderAndRevokedLeadership: persist before publish before
// events; a leadership revoked in the same Output is never delivered (the
// application would act as leader after losing it); a failed save holds the
// group's publishes (nothing leaves before it is durable).
func TestDriverOrderAndRevokedLeadership(t *testing.T) {
	var log []string
	fail := false
	d := Driver{
		Save: func(s GroupState) error {
			if fail {
				return errors.New("EIO")
			}
			log = append(log, "save")
			return nil
		},
		Publish: func(Message) { log = append(log, "publish") },
		Event:   func(ev Event) { log = append(log, ev.Kind.String()) },
	}
	d.Apply(&Output{
		Persist:   []GroupState{{Group: "g", Term: 2}},
		Publishes: []Message{{Topic: Topic("g")}},
		Events: []Event{
			{Kind: EventBecameLeader, Group: "g", Term: 2},
			{Kind: EventLease, Group: "g", Term: 2, LeaseUntil: 10},
			{Kind: EventSteppedDown, Group: "g", Term: 2},
			{Kind: EventBecameLeader, Group: "h", Term: 1},
		},
	})
	if got := strings.Join(log, ","); got != "save,publish,stepped-down,became-leader" {
		t.Fatalf("applied %s", got)
	}
	log, fail = nil, true
	held, err := d.Apply(&Output{Persist: []GroupState{{Group: "g", Term: 3}}, Publishes: []Message{{Topic: Topic("g")}}})
	if held != 1 || err == nil || len(log) != 0 {
		t.Fatalf("with a failing save: held %d, err %v, applied %v", held, err, log)
	}
}
