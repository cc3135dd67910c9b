package core

import (
	"errors"
	"testing"
)

// TestPersistGateHoldsDependentPublishes: a failed save keeps the state
// dirty, and nothing of that group is published, in that batch or any
// later one, until a save succeeds. Other groups are
// unaffected.
func TestPersistGateHoldsDependentPublishes(t *testing.T) {
	var gate PersistGate
	failing := true
	var saved []GroupState
	save := func(s GroupState) error {
		if failing && s.Group == "g" {
			return errors.New("disk full")
		}
		saved = append(saved, s)
		return nil
	}
	pub := func(group string) Message { return Message{Topic: Topic(group), Payload: []byte(`{}`)} }

	out := Output{Persist: []GroupState{{Group: "g", Term: 3, Vote: "a"}, {Group: "h", Term: 1}},
		Publishes: []Message{pub("g"), pub("h")}}
	held, err := gate.Apply(&out, save)
	if err == nil || held != 1 || len(out.Publishes) != 1 || out.Publishes[0].Topic != Topic("h") {
		t.Fatalf("held %d, err %v, publishes %v", held, err, out.Publishes)
	}
	// A later batch with no state change: g's ack still rests on term 3.
	out = Output{Publishes: []Message{pub("g")}}
	if held, _ := gate.Apply(&out, save); held != 1 || len(out.Publishes) != 0 || !gate.Unsaved("g") {
		t.Fatalf("later batch: held %d, publishes %v", held, out.Publishes)
	}
	// A newer state replaces the unsaved one; once saving works, only the
	// latest is written and publishing resumes.
	failing = false
	out = Output{Persist: []GroupState{{Group: "g", Term: 4, Vote: "b"}}, Publishes: []Message{pub("g")}}
	if held, err := gate.Apply(&out, save); held != 0 || err != nil || len(out.Publishes) != 1 {
		t.Fatalf("after recovery: held %d, err %v, publishes %v", held, err, out.Publishes)
	}
	last := saved[len(saved)-1]
	if last.Group != "g" || last.Term != 4 || last.Vote != "b" || gate.Unsaved("g") {
		t.Fatalf("saved %+v, unsaved %v", saved, gate.Unsaved("g"))
	}
	for _, s := range saved {
		if s.Group == "g" && s.Term == 3 {
			t.Fatalf("the superseded state was written: %+v", saved)
		}
	}
}

// TestPersistGateEngineCrash drives a real engine: a vote granted while its
// save fails is never sent, and after the failing saves the restarted node
// (from what was durable) cannot have told anyone a vote it forgot.
func TestPersistGateEngineCrash(t *testing.T) {
	e := NewEngine()
	var out Output
	if err := e.Join(GroupSpec{Config: Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}}, 0, &out); err != nil {
		t.Fatal(err)
	}
	var gate PersistGate
	var disk testDisk
	gate.Apply(&out, disk.save)
	disk.failing = true
	out.Reset()
	e.Step(&Input{Now: 5000, Inbound: []Message{{Topic: Topic("g"),
		Payload: []byte(`{"type":"election","group":"g","from":"b","candidate":"b","priority":1,"term":1}`)}}}, &out)
	if len(out.Publishes) == 0 {
		t.Fatal("the engine granted no vote: the test no longer exercises the gate")
	}
	held, err := gate.Apply(&out, disk.save)
	if err == nil || held == 0 || len(out.Publishes) != 0 {
		t.Fatalf("vote sent without its state durable: held %d, err %v, %q", held, err, out.Publishes)
	}
	if disk.durable.Term != 0 || disk.durable.Vote != "" {
		t.Fatalf("durable %+v", disk.durable)
	}
}

// TestPersistGateHoldsLeadership: a leadership that rests on an unsaved vote
// reaches the application only once the vote is durable; one that ends
// before that never does; losing authority is always reported at once.
func TestPersistGateHoldsLeadership(t *testing.T) {
	var gate PersistGate
	disk := testDisk{failing: true}
	kinds := func(evs []Event) (s []string) {
		for _, ev := range evs {
			s = append(s, ev.Kind.String())
		}
		return s
	}
	out := Output{Persist: []GroupState{{Group: "g", Term: 2, Vote: "a"}}, Events: []Event{
		{Kind: EventBecameLeader, Group: "g", Term: 2, Leader: "a"},
		{Kind: EventLeaderChanged, Group: "g", Term: 2, Leader: "a"},
	}}
	gate.Apply(&out, disk.save)
	if got := kinds(out.Events); len(got) != 1 || got[0] != "leader-changed" {
		t.Fatalf("while unsaved: %v", got)
	}
	out = Output{Events: []Event{{Kind: EventLease, Group: "g", Term: 2, Leader: "a", LeaseUntil: 900}}}
	gate.Apply(&out, disk.save)
	if len(out.Events) != 0 {
		t.Fatalf("a lease of a held leadership was delivered: %v", kinds(out.Events))
	}
	disk.failing = false
	out = Output{}
	gate.Apply(&out, disk.save)
	if len(out.Events) != 1 || out.Events[0].Kind != EventBecameLeader || out.Events[0].LeaseUntil != 900 {
		t.Fatalf("after the save: %+v", out.Events)
	}
	// A leadership that ends while unsaved is never delivered; its end is.
	disk.failing = true
	out = Output{Persist: []GroupState{{Group: "g", Term: 3, Vote: "a"}}, Events: []Event{{Kind: EventBecameLeader, Group: "g", Term: 3}}}
	gate.Apply(&out, disk.save)
	out = Output{Events: []Event{{Kind: EventSteppedDown, Group: "g", Term: 3}}}
	gate.Apply(&out, disk.save)
	disk.failing = false
	out2 := Output{}
	gate.Apply(&out2, disk.save)
	if got := kinds(out.Events); len(got) != 1 || got[0] != "stepped-down" || len(out2.Events) != 0 {
		t.Fatalf("ended while unsaved: %v then %v", got, kinds(out2.Events))
	}
}

// TestPersistGateHoldsConfigEvents: a configuration event rests on the
// state it comes with. A group of one commits its configuration (the new
// leader's re-stamp) in the Output that persists it, with nobody else
// holding it: reported while that save failed, a crash would have left the
// application told of a committed configuration no member holds. The event
// waits for the save, after the became-leader it followed.
func TestPersistGateHoldsConfigEvents(t *testing.T) {
	e := NewEngine()
	var out Output
	if err := e.Join(GroupSpec{Config: Config{ID: "a", Group: "g", Members: []string{"a"}}}, 0, &out); err != nil {
		t.Fatal(err)
	}
	var gate PersistGate
	disk := testDisk{failing: true}
	gate.Apply(&out, disk.save)
	out.Reset()
	e.Step(&Input{Now: 10_000}, &out)
	committed := func(evs []Event) int {
		for i, ev := range evs {
			if ev.Kind == EventConfig && ev.Reason == "committed" {
				return i
			}
		}
		return -1
	}
	if committed(out.Events) < 0 || len(out.Persist) == 0 || out.Persist[0].ConfIndex == 0 {
		t.Fatalf("the engine committed no configuration with its state: the test no longer exercises the gate: %+v", out)
	}
	gate.Apply(&out, disk.save)
	if i := committed(out.Events); i >= 0 {
		t.Fatalf("configuration reported committed while its state is unsaved (durable %+v): %+v", disk.durable, out.Events[i])
	}
	disk.failing = false
	out.Reset()
	e.Step(&Input{Now: 10_001}, &out)
	gate.Apply(&out, disk.save)
	i := committed(out.Events)
	if i < 0 || disk.durable.ConfIndex != out.Events[i].ConfIndex {
		t.Fatalf("after the save (durable %+v): %+v", disk.durable, out.Events)
	}
	if i == 0 || out.Events[0].Kind != EventBecameLeader {
		t.Fatalf("released out of order: %+v", out.Events)
	}
	// Left with events held: none is delivered.
	disk.failing = true
	gate.Apply(&Output{Persist: []GroupState{{Group: "g", Term: 9}}, Events: []Event{{Kind: EventConfig, Group: "g", Reason: "committed"}}}, disk.save)
	out = Output{Events: []Event{{Kind: EventLeft, Group: "g"}}}
	gate.Apply(&out, disk.save)
	disk.failing = false
	out2 := Output{}
	gate.Apply(&out2, disk.save)
	if len(out.Events) != 1 || out.Events[0].Kind != EventLeft || len(out2.Events) != 0 {
		t.Fatalf("left while unsaved: %+v then %+v", out.Events, out2.Events)
	}
}

// testDisk is a store whose saves fail while failing is set; durable is the
// last state it saved.
type testDisk struct {
	durable GroupState
	failing bool
}

func (d *testDisk) save(s GroupState) error {
	if d.failing {
		return errors.New("EIO")
	}
	d.durable = s
	return nil
}
