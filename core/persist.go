package core

import (
	"maps"
	"slices"
	"strings"
)

// PersistGate keeps the persist-before-send contract across batches for a
// host whose saves can fail. The core hands each changed GroupState over
// once; if saving it fails, every later Output of that group may carry
// messages (acks, votes, heartbeats) that rest on the unsaved term and vote,
// and a crash would then let the agent vote twice. The gate remembers the
// latest unsaved state of each group, offers it again before every later
// batch, and holds back the group's publishes until a save succeeds. Held
// messages are simply lost, which the protocol tolerates like any message
// loss. Events still reach the application, except those that rest on the
// unsaved state: a leadership (its became-leader, with the lease it grants)
// and a configuration (every EventConfig: the configuration it reports is
// in that state, and a one-member group's "committed" rests on nothing
// else) wait, in order, until the state is durable; a leadership that ends
// first is dropped, and all of them if the group is left. Everything that
// takes authority away (stepped-down, leader-changed, left) is delivered at
// once.
//
// The zero value is ready to use. A host calls Apply on every Output, before
// it publishes anything, and applies out.Events after it.
type PersistGate struct {
	unsaved map[string]GroupState // by group: the latest state not yet durable
	held    map[string][]Event    // by group: became-leader and config events not yet delivered, in order
}

// Apply saves, with save, every state in out.Persist and every state an
// earlier Apply could not save (only the latest per group is written), then
// removes from out.Publishes the publishes of every group whose state is
// still not durable, and holds or releases leadership events as described
// above. It returns how many publishes it held back and the first save
// error.
func (p *PersistGate) Apply(out *Output, save func(GroupState) error) (held int, err error) {
	for _, s := range out.Persist {
		if p.unsaved == nil {
			p.unsaved = make(map[string]GroupState)
		}
		p.unsaved[s.Group] = s // latest wins
	}
	defer p.gateEvents(out)
	if len(p.unsaved) == 0 {
		return 0, nil
	}
	for _, group := range slices.Sorted(maps.Keys(p.unsaved)) {
		if e := save(p.unsaved[group]); e != nil {
			if err == nil {
				err = e
			}
			continue
		}
		delete(p.unsaved, group)
	}
	if len(p.unsaved) == 0 {
		return 0, err
	}
	kept := out.Publishes[:0]
	for _, m := range out.Publishes {
		if p.Unsaved(groupOfTopic(m.Topic)) {
			held++
			continue
		}
		kept = append(kept, m)
	}
	out.Publishes = kept
	return held, err
}

// gateEvents holds a group's became-leader (and the leases that follow it)
// and config events while its state is not durable, and releases them,
// first, in the first Output after the state is saved.
func (p *PersistGate) gateEvents(out *Output) {
	if len(p.unsaved) == 0 && len(p.held) == 0 {
		return
	}
	var events []Event
	for _, group := range slices.Sorted(maps.Keys(p.held)) { // one order on every host
		if !p.Unsaved(group) {
			events = append(events, p.held[group]...)
			delete(p.held, group)
		}
	}
	for _, ev := range out.Events {
		h := p.held[ev.Group]
		leader := slices.IndexFunc(h, func(e Event) bool { return e.Kind == EventBecameLeader })
		switch {
		case (ev.Kind == EventBecameLeader || ev.Kind == EventConfig) && p.Unsaved(ev.Group):
			if p.held == nil {
				p.held = make(map[string][]Event)
			}
			p.held[ev.Group] = append(h, ev)
			continue
		case ev.Kind == EventLease && leader >= 0:
			h[leader].LeaseUntil = ev.LeaseUntil
			continue
		case ev.Kind == EventSteppedDown && leader >= 0:
			p.held[ev.Group] = slices.Delete(h, leader, leader+1) // ended before the application heard of it
		case ev.Kind == EventLeft:
			delete(p.held, ev.Group)
		}
		events = append(events, ev)
	}
	out.Events = events
}

// Unsaved reports whether group has a state that is not yet durable.
func (p *PersistGate) Unsaved(group string) bool {
	_, ok := p.unsaved[group]
	return ok
}

// groupOfTopic inverts Topic ("" for a topic that is not a group's).
func groupOfTopic(topic string) string {
	group, ok := strings.CutPrefix(topic, topicPrefix)
	if !ok {
		return ""
	}
	return group
}
