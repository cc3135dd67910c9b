// The Agent loop in-process: three agents over an in-memory bus elect one
// leader; every publish leaves only after the state of its term is on disk
// (persist-before-send); a restarted agent resumes from its state file; a
// closing leader resigns and hands off at once.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { loadCore, quietWasiWarning, natsSubject } from '../lib/electcore.mjs';
import { Agent, FileStore } from '../lib/agent.mjs';
import { tempDir, waitFor, wasmPath, requireWasm } from './helpers.mjs';

quietWasiWarning();
requireWasm();

function memBus() {
  const subs = [];
  return {
    transport(check) {
      return {
        publish(topic, payload) {
          check?.(payload);
          const copy = payload.slice();
          setTimeout(() => { for (const s of subs) if (s.topic === topic) s.deliver(copy); }, 2);
        },
        async subscribe(topic, deliver) { subs.push({ topic, deliver }); },
      };
    },
  };
}

test('three in-process agents: election, persist-before-send, restart, hand-off', { timeout: 300_000 }, async (t) => {
  const dir = tempDir('electcore-agent-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ids = ['a', 'b', 'c'];
  const bus = memBus();
  const leaders = new Map();
  const joinedAt = new Map(); // id -> the term its last join started from
  const committedIn = new Map(); // id -> the term of its last committed configuration
  const sent = []; // every message published, in order
  const violations = [];
  const make = async (id, engine) => {
    const store = new FileStore(path.join(dir, id));
    const check = (payload) => { // a term on the wire never exceeds the persisted term (pre-votes carry the next one)
      const msg = JSON.parse(new TextDecoder().decode(payload));
      sent.push(msg);
      if (msg.pre) return;
      const term = msg.term ?? 0;
      const saved = store.load('g')?.term ?? 0;
      if (term > saved) violations.push(new TextDecoder().decode(payload));
    };
    const ag = new Agent({
      core: await loadCore(engine, wasmPath), store, transport: bus.transport(check),
      onEvent: (e) => {
        if (e.event === 'leader-changed') leaders.set(id, `${e.leader}@${e.term}`);
        if (e.event === 'joined') joinedAt.set(id, e.term);
        if (e.event === 'config' && e.reason === 'committed') committedIn.set(id, e.term);
      },
    });
    // Nothing below is timed against the election timeout: 1 s keeps the
    // leader's lease through a loaded machine's stalls (at 300 ms it was
    // lost, and the group re-elected, in half the runs at load 7).
    await ag.join({ id, group: 'g', members: ids, heartbeat_ms: 100, election_timeout_ms: 1000, priority: { a: 3, b: 2, c: 1 }[id] });
    return ag;
  };
  const agents = { a: await make('a', 'extism'), b: await make('b', 'raw'), c: await make('c', 'extism') };
  t.after(async () => { for (const ag of Object.values(agents)) if (!ag.closed) await ag.close({ resign: false }); });
  const agree = () => { const v = [...leaders.values()]; return v.length === 3 && v.every((x) => x === v[0] && !x.startsWith('@')) && v[0]; };
  const first = await waitFor(agree, 60_000, 'an agreed leader');
  const [leader, term] = first.split('@');
  t.diagnostic(`leader ${first}`);
  const onDisk = JSON.parse(readFileSync(path.join(dir, 'b', 'g.json'), 'utf8'));
  assert.equal(onDisk.group, 'g');
  // Saved before b said anything in it: the agreed term, or a later one
  // if the group re-elected since (a lease lost to a loaded machine).
  assert.ok(onDisk.term >= Number(term), `b's state file holds term ${onDisk.term}, below the agreed ${term}`);

  // A follower restarts from its state file (a new core, same store): it
  // joins at the term on disk and follows a leader again. Not necessarily
  // the same term: on a loaded machine compiling the new core can stall the
  // event loop past the election timeout, and the group re-elects.
  const f = ids.find((x) => x !== leader);
  await agents[f].close({ resign: false });
  leaders.delete(f);
  const saved = JSON.parse(readFileSync(path.join(dir, f, 'g.json'), 'utf8')).term;
  agents[f] = await make(f, 'raw');
  assert.ok(saved >= Number(term), `${f} saved term ${saved}, below ${term}`);
  assert.equal(joinedAt.get(f), saved, `${f} resumed from its state file`);
  // A leader hands off only to a member that acknowledged its
  // configuration (else its resign names nobody): after a re-election, wait
  // for the new leader's configuration to commit.
  const current = await waitFor(() => {
    const v = agree();
    const [who, at] = v ? v.split('@') : [];
    return v && committedIn.get(who) === Number(at) && v;
  }, 60_000, `${f} to follow a leader again, its configuration committed`);
  const holder = current.split('@')[0];

  // The leader closes: it resigns to a successor, which leads at once,
  // without the campaign an election timeout would start (what a hand-off
  // saves is that wait, so the test checks the path, not a wall-clock time
  // that a loaded machine stretches).
  const t0 = Date.now();
  const mark = sent.length;
  await agents[holder].close();
  leaders.delete(holder);
  const rest = ids.filter((x) => x !== holder);
  const next = await waitFor(() => {
    const v = rest.map((x) => leaders.get(x));
    return v[0] && v[0] === v[1] && !v[0].startsWith('@') && v[0] !== current && v[0];
  }, 60_000, 'a successor');
  t.diagnostic(`hand-off from ${current} to ${next} in ${Date.now() - t0} ms`);
  const successor = next.split('@')[0];
  const since = sent.slice(mark);
  assert.ok(since.some((m) => m.type === 'resign' && m.from === holder && m.to === successor),
    `${holder} resigned to ${successor}: ${JSON.stringify(since)}`);
  assert.deepEqual(since.filter((m) => m.type === 'election' && m.from === successor), [],
    `${successor} campaigned instead of taking the hand-off`);
  assert.deepEqual(violations, [], 'published a term before persisting it');
});

test('NATS subjects match transport/nats.Subject', () => {
  assert.equal(natsSubject('election:g1'), 'election:g1');
  assert.equal(natsSubject('election:a/b'), 'electcore.enc.' + Buffer.from('election:a/b').toString('base64url'));
  assert.equal(natsSubject('election:x.'), 'electcore.enc.' + Buffer.from('election:x.').toString('base64url'));
  assert.equal(natsSubject('electcore.enc.x'), 'electcore.enc.' + Buffer.from('electcore.enc.x').toString('base64url'));
});

test('a failed save holds every later publish of the group until a save succeeds', { timeout: 120_000 }, async () => {
  let failing = true;
  let saved = null;
  const store = {
    load: () => null,
    save(state) { if (failing) throw new Error('disk full'); saved = state; },
  };
  const sent = [];
  const transport = { publish: (topic, payload) => sent.push(new TextDecoder().decode(payload)), async subscribe() {} };
  const ag = new Agent({ core: await loadCore('raw', wasmPath), store, transport });
  await ag.join({ id: 'a', group: 'g', members: ['a', 'b', 'c'], heartbeat_ms: 20, election_timeout_ms: 100 });
  // Several election timeouts: the agent pre-campaigns again and again, but
  // its state (the join's new epoch) was never saved, so nothing may leave.
  // Waited for by its cause (three failed saves, with publishes held),
  // not for a time a loaded machine may spend without one.
  await waitFor(() => ag.stats.held >= 3 && ag.stats.persistErrors >= 3, 60_000, 'three failed saves, publishes held');
  assert.deepEqual(sent, [], 'published while its state was not durable');
  failing = false;
  await waitFor(() => sent.length > 0, 60_000, 'a publish once saving works');
  assert.ok(saved, 'the pending state was saved');
  await ag.close({ resign: false });
});

test('membership: add-member commits everywhere; the state file keeps the configuration for a restart', { timeout: 180_000 }, async (t) => {
  const dir = tempDir('electcore-members-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ids = ['a', 'b', 'c'];
  const bus = memBus();
  const leaders = new Map();
  const leaderChanges = new Map(); // id -> how many leader changes it saw
  const refusals = new Map(); // id -> the reasons of its 'rejected' events
  const committed = new Map(); // id -> the members of its last committed config event
  const make = async (id, engine) => {
    const ag = new Agent({
      core: await loadCore(engine, wasmPath), store: new FileStore(path.join(dir, id)), transport: bus.transport(),
      onEvent: (e) => {
        if (e.event === 'leader-changed') {
          leaders.set(id, e.leader);
          leaderChanges.set(id, (leaderChanges.get(id) ?? 0) + 1);
        }
        if (e.event === 'rejected') refusals.set(id, [...(refusals.get(id) ?? []), e.reason]);
        if (e.event === 'config' && e.reason === 'committed') committed.set(id, e.members.join(','));
      },
    });
    // A lease of about a second, which a loaded machine's stalls do not
    // cost (at 50 ms / 300 ms a CI run at load 20-28 did not see the change
    // committed everywhere within 10 s).
    await ag.join({ id, group: 'g', members: ids, heartbeat_ms: 100, election_timeout_ms: 1000 });
    return ag;
  };
  const agents = { a: await make('a', 'raw'), b: await make('b', 'extism'), c: await make('c', 'raw') };
  t.after(async () => { for (const ag of Object.values(agents)) if (!ag.closed) await ag.close({ resign: false }); });
  const leader = await waitFor(() => { const v = ids.map((x) => leaders.get(x)); return v[0] && v.every((x) => x === v[0]) && v[0]; }, 60_000, 'a leader');
  const follower = ids.find((x) => x !== leader);
  // The follower forwards the change to the leader it knows. The request is
  // lost if the follower knows none when it steps it (refused: 'no leader
  // known') or if that leader's leadership ends first: it is asked again
  // on either cause, as the Go host does (a change already made or under
  // way is refused harmlessly by the leader), once it knows a leader.
  const seen = () => ({ changes: leaderChanges.get(follower) ?? 0, refused: (refusals.get(follower) ?? []).length });
  let asked = seen();
  let asks = 1;
  await agents[follower].command('add-member', 'g', 'd');
  await waitFor(() => {
    if (ids.every((x) => committed.get(x) === 'a,b,c,d')) return true;
    const now = seen();
    if ((now.changes > asked.changes || now.refused > asked.refused) && leaders.get(follower)) {
      asked = now;
      asks++;
      agents[follower].command('add-member', 'g', 'd');
    }
    return false;
  }, 60_000, 'a,b,c,d committed everywhere');
  const refused = refusals.get(follower) ?? [];
  t.diagnostic(`add-member d via ${follower}: asked ${asks} time(s), refused ${refused.length} time(s)${refused.length ? ` (last: ${refused.at(-1)})` : ''}`);
  const onDisk = JSON.parse(readFileSync(path.join(dir, follower, 'g.json'), 'utf8'));
  assert.deepEqual(onDisk.members, ['a', 'b', 'c', 'd']);
  assert.ok(onDisk.conf_index >= 2, JSON.stringify(onDisk));

  // A restart with the old member list comes back with the persisted configuration.
  await agents[follower].close({ resign: false });
  agents[follower] = await make(follower, 'extism');
  const st = await agents[follower].status('g');
  assert.deepEqual(st.members.map((m) => m.id), ['a', 'b', 'c', 'd']);
  assert.equal(st.voter, true);
});

test('FileStore keeps ed25519 keys (bytes) across a save and a load', () => {
  const dir = tempDir('electcore-keys-');
  try {
    const store = new FileStore(dir);
    const key = new Uint8Array(32).map((_, i) => i);
    store.save({ group: 'g', term: 2, vote: 'a', conf_term: 2, conf_index: 3, members: ['a'], keys: [key] });
    const s = store.load('g');
    assert.deepEqual(s.keys, [key]);
    assert.deepEqual(s.members, ['a']);
    store.release();
  } finally { rmSync(dir, { recursive: true, force: true }); }
});
