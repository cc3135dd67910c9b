package core

// Driver applies Outputs for a host in the contract's order — persist, then
// publish, then events — so that no host writes that loop itself: the Go
// host, the host-driven module and any other Go host share it.
//
//   - Persist: every state goes through a PersistGate, so a failed save holds
//     the group's publishes (this batch's and later ones') and the
//     leadership and configuration events that rest on it until a save
//     succeeds.
//   - Publish: in order, after the persist.
//   - Events: in order, except that a leadership the same Output revokes (a
//     became-leader, and its leases, followed by a stepped-down of the same
//     group) is left out: an application must never start acting on it.
//
// WakeAt stays the host's to honour (it owns timers), as do the leases the
// events grant (it must stop acting at LeaseUntil by its own clock).
type Driver struct {
	Save    func(GroupState) error // write a state durably
	Publish func(Message)          // send a message on the bus
	Event   func(Event)            // deliver an event to the application

	gate PersistGate
}

// Apply carries out out (whose Publishes and Events it may rewrite) and
// returns how many publishes it held back and the first save error.
func (d *Driver) Apply(out *Output) (held int, err error) {
	held, err = d.gate.Apply(out, d.Save)
	for _, m := range out.Publishes {
		d.Publish(m)
	}
	var revokedUntil map[string]int // group → index of its last stepped-down
	for i, ev := range out.Events {
		if ev.Kind == EventSteppedDown {
			if revokedUntil == nil {
				revokedUntil = make(map[string]int)
			}
			revokedUntil[ev.Group] = i
		}
	}
	for i, ev := range out.Events {
		if ev.Kind == EventBecameLeader || ev.Kind == EventLease {
			if j, ok := revokedUntil[ev.Group]; ok && i < j {
				continue
			}
		}
		d.Event(ev)
	}
	return held, err
}
