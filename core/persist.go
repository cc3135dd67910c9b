package core

// PersistGate keeps the persist-before-send contract across batches for a
// host whose saves can fail. The core hands each changed GroupState over
// once; if saving it fails, every later Output of that group may carry
// messages (acks, votes, heartbeats) that rest on the unsaved term and vote,
// and a crash would then let the agent vote twice. The gate remembers the
// latest unsaved state of each group, offers it again before every later
// batch, and holds back the group's publishes until a save succeeds. Held
// messages are simply lost, which the protocol tolerates like any message
// loss; events still reach the application.
//
// The zero value is ready to use. A host calls Apply on every Output, before
// it publishes anything.
type PersistGate struct {
	unsaved map[string]GroupState // by group: the latest state not yet durable
}

// Apply saves, with save, every state in out.Persist and every state an
// earlier Apply could not save (only the latest per group is written), then
// removes from out.Publishes the publishes of every group whose state is
// still not durable. It returns how many publishes it held back and the
// first save error.
func (p *PersistGate) Apply(out *Output, save func(GroupState) error) (held int, err error) {
	for _, s := range out.Persist {
		if p.unsaved == nil {
			p.unsaved = make(map[string]GroupState)
		}
		p.unsaved[s.Group] = s // latest wins
	}
	if len(p.unsaved) == 0 {
		return 0, nil
	}
	for group, s := range p.unsaved {
		if e := save(s); e != nil {
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

// Unsaved reports whether group has a state that is not yet durable.
func (p *PersistGate) Unsaved(group string) bool {
	_, ok := p.unsaved[group]
	return ok
}

func groupOfTopic(topic string) string {
	const prefix = "election:"
	if len(topic) > len(prefix) && topic[:len(prefix)] == prefix {
		return topic[len(prefix):]
	}
	return ""
}
