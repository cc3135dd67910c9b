// driver.mjs — the output contract every electcore host keeps, in
// JavaScript: a line-for-line port of core.PersistGate (core/persist.go) and
// core.Driver (core/driver.go), which the Go hosts share. JavaScript cannot
// call the Go code (the module exports the core, not its host loop), so this
// file mirrors it; test/driver.test.mjs runs the Go tests' cases on it.
//
//   - Persist: every state is saved before anything is published; a state
//     whose save fails stays pending (the latest per group), is offered again
//     before every later batch, and until it is saved the group publishes
//     nothing (its acks and votes rest on that term and vote).
//   - Publish: in order, after the persist.
//   - Events: in order, except that a became-leader (and the leases after it)
//     and every config event of a group whose state is not yet durable wait,
//     in order, until it is — a leadership that ends first is dropped, and
//     all of them if the group is left — and a leadership the same output
//     revokes (became-leader or lease before a stepped-down of the group) is
//     left out. Whatever takes authority away is delivered at once.
//
// Output fields as decodeOutput gives them: persist [{group, ...}],
// pub [{t, p}], ev [{k, g, lease, ...}].

const BecameLeader = 2, Lease = 3, SteppedDown = 4, Left = 7, Config = 9;
const topicPrefix = 'election:';

// groupOfTopic inverts topicOf ('' for a topic that is not a group's).
const groupOfTopic = (t) => (t.startsWith(topicPrefix) ? t.slice(topicPrefix.length) : '');

export class PersistGate {
  unsaved = new Map(); // group -> the latest state not yet durable
  held = new Map(); // group -> became-leader and config events not yet delivered, in order

  // apply saves (save(state) throws on failure) every state of out.persist
  // and every state an earlier apply could not save, in group order, then
  // drops from out.pub the publishes of every group still unsaved, and holds
  // or releases leadership events. It returns { held, errors }: how many
  // publishes it held back and the save errors.
  apply(out, save) {
    for (const s of out.persist) this.unsaved.set(s.group, s); // latest wins
    const errors = [];
    let held = 0;
    if (this.unsaved.size > 0) {
      for (const group of [...this.unsaved.keys()].sort()) {
        try {
          save(this.unsaved.get(group));
          this.unsaved.delete(group);
        } catch (err) {
          errors.push(err);
        }
      }
      if (this.unsaved.size > 0) {
        const kept = out.pub.filter((m) => !this.unsaved.has(groupOfTopic(m.t)));
        held = out.pub.length - kept.length;
        out.pub = kept;
      }
    }
    this.gateEvents(out);
    return { held, errors };
  }

  gateEvents(out) {
    if (this.unsaved.size === 0 && this.held.size === 0) return;
    const events = [];
    // One order on every host. (sort() compares UTF-16 units, Go bytes: they
    // disagree only between characters above U+FFFF and U+E000–U+FFFF.)
    for (const group of [...this.held.keys()].sort()) {
      if (!this.unsaved.has(group)) {
        events.push(...this.held.get(group));
        this.held.delete(group);
      }
    }
    for (const ev of out.ev) {
      const h = this.held.get(ev.g) ?? [];
      const leader = h.findIndex((e) => e.k === BecameLeader);
      if ((ev.k === BecameLeader || ev.k === Config) && this.unsaved.has(ev.g)) {
        this.held.set(ev.g, [...h, ev]);
        continue;
      }
      if (ev.k === Lease && leader >= 0) {
        h[leader] = { ...h[leader], lease: ev.lease };
        continue;
      }
      if (ev.k === SteppedDown && leader >= 0) h.splice(leader, 1); // ended before the application heard of it
      if (ev.k === Left) this.held.delete(ev.g);
      events.push(ev);
    }
    out.ev = events;
  }
}

export class Driver {
  // save(state) throws on failure; publish(message); event(ev).
  constructor({ save, publish, event }) {
    Object.assign(this, { save, publish, event });
    this.gate = new PersistGate();
  }

  // apply carries out out (it may rewrite out.pub and out.ev) and returns
  // { held, errors } as PersistGate.apply does. out.wake stays the caller's.
  apply(out) {
    const result = this.gate.apply(out, this.save);
    for (const m of out.pub) this.publish(m);
    const revokedUntil = new Map(); // group -> index of its last stepped-down
    out.ev.forEach((ev, i) => { if (ev.k === SteppedDown) revokedUntil.set(ev.g, i); });
    out.ev.forEach((ev, i) => {
      if ((ev.k === BecameLeader || ev.k === Lease) && i < (revokedUntil.get(ev.g) ?? -1)) return;
      this.event(ev);
    });
    return result;
  }
}
