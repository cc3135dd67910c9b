// driver.mjs against the cases of the Go tests it mirrors
// (core/driver_test.go, core/persist_test.go): the same inputs must give the
// same saves, publishes and events as core.Driver and core.PersistGate.
import test from 'node:test';
import assert from 'node:assert/strict';
import { Driver, PersistGate } from '../lib/driver.mjs';
import { EventNames, topicOf } from '../lib/electcore.mjs';

const K = Object.fromEntries(Object.entries(EventNames).map(([k, name]) => [name, Number(k)]));
const out = ({ persist = [], pub = [], ev = [] } = {}) => ({ persist, pub, ev, wake: 0 });
const pub = (group) => ({ t: topicOf(group), p: new Uint8Array([123, 125]) });
const names = (evs) => evs.map((e) => EventNames[e.k]);

test('Driver: persist, publish, events; a leadership revoked in the same output is never delivered; a failed save holds publishes', () => {
  let log = [];
  let fail = false;
  const d = new Driver({
    save: () => { if (fail) throw new Error('EIO'); log.push('save'); },
    publish: () => log.push('publish'),
    event: (ev) => log.push(EventNames[ev.k]),
  });
  d.apply(out({
    persist: [{ group: 'g', term: 2 }],
    pub: [pub('g')],
    ev: [
      { k: K['became-leader'], g: 'g', term: 2 },
      { k: K.lease, g: 'g', term: 2, lease: 10 },
      { k: K['stepped-down'], g: 'g', term: 2 },
      { k: K['became-leader'], g: 'h', term: 1 },
    ],
  }));
  assert.equal(log.join(','), 'save,publish,stepped-down,became-leader');
  log = []; fail = true;
  const { held, errors } = d.apply(out({ persist: [{ group: 'g', term: 3 }], pub: [pub('g')] }));
  assert.deepEqual([held, errors.length, log.length], [1, 1, 0]);
});

test('PersistGate: a failed save holds the group\'s publishes in later batches too, until the latest state is saved', () => {
  const gate = new PersistGate();
  let failing = true;
  const saved = [];
  const save = (s) => { if (failing && s.group === 'g') throw new Error('disk full'); saved.push(s); };

  let o = out({ persist: [{ group: 'g', term: 3, vote: 'a' }, { group: 'h', term: 1 }], pub: [pub('g'), pub('h')] });
  let r = gate.apply(o, save);
  assert.deepEqual([r.held, r.errors.length, o.pub.map((m) => m.t)], [1, 1, [topicOf('h')]]);
  // A later batch with no state change: g's ack still rests on term 3.
  o = out({ pub: [pub('g')] });
  r = gate.apply(o, save);
  assert.deepEqual([r.held, o.pub.length, gate.unsaved.has('g')], [1, 0, true]);
  // A newer state replaces the unsaved one; once saving works only it is written.
  failing = false;
  o = out({ persist: [{ group: 'g', term: 4, vote: 'b' }], pub: [pub('g')] });
  r = gate.apply(o, save);
  assert.deepEqual([r.held, r.errors.length, o.pub.length, gate.unsaved.has('g')], [0, 0, 1, false]);
  assert.deepEqual(saved.filter((s) => s.group === 'g'), [{ group: 'g', term: 4, vote: 'b' }]);
});

test('PersistGate: a leadership on an unsaved vote waits for the save, and one that ends first is never delivered', () => {
  const gate = new PersistGate();
  let failing = true;
  const save = () => { if (failing) throw new Error('EIO'); };

  let o = out({ persist: [{ group: 'g', term: 2, vote: 'a' }], ev: [
    { k: K['became-leader'], g: 'g', term: 2, leader: 'a' },
    { k: K['leader-changed'], g: 'g', term: 2, leader: 'a' },
  ] });
  gate.apply(o, save);
  assert.deepEqual(names(o.ev), ['leader-changed']);
  o = out({ ev: [{ k: K.lease, g: 'g', term: 2, leader: 'a', lease: 900 }] });
  gate.apply(o, save);
  assert.deepEqual(names(o.ev), []);
  failing = false;
  o = out();
  gate.apply(o, save);
  assert.deepEqual([names(o.ev), o.ev[0].lease], [['became-leader'], 900]);

  failing = true;
  gate.apply(out({ persist: [{ group: 'g', term: 3, vote: 'a' }], ev: [{ k: K['became-leader'], g: 'g', term: 3 }] }), save);
  o = out({ ev: [{ k: K['stepped-down'], g: 'g', term: 3 }] });
  gate.apply(o, save);
  failing = false;
  const o2 = out();
  gate.apply(o2, save);
  assert.deepEqual([names(o.ev), names(o2.ev)], [['stepped-down'], []]);
});

test('PersistGate: config events wait for the save of the state they report, after the leadership they followed; none survives leaving', () => {
  const gate = new PersistGate();
  let failing = true;
  const save = () => { if (failing) throw new Error('EIO'); };

  // A group of one: its new leader's re-stamp commits in the output that persists it.
  let o = out({ persist: [{ group: 'g', term: 1, vote: 'a', conf_term: 1, conf_index: 1, members: ['a'] }], ev: [
    { k: K['became-leader'], g: 'g', term: 1, leader: 'a' },
    { k: K['leader-changed'], g: 'g', term: 1, leader: 'a' },
    { k: K.config, g: 'g', term: 1, why: 'committed', members: ['a'], conf_index: 1 },
  ] });
  gate.apply(o, save);
  assert.deepEqual(names(o.ev), ['leader-changed']);
  failing = false;
  o = out();
  gate.apply(o, save);
  assert.deepEqual([names(o.ev), o.ev[1].why], [['became-leader', 'config'], 'committed']);

  failing = true;
  gate.apply(out({ persist: [{ group: 'g', term: 9 }], ev: [{ k: K.config, g: 'g', why: 'committed' }] }), save);
  o = out({ ev: [{ k: K.left, g: 'g' }] });
  gate.apply(o, save);
  failing = false;
  const o2 = out();
  gate.apply(o2, save);
  assert.deepEqual([names(o.ev), names(o2.ev)], [['left'], []]);
});
