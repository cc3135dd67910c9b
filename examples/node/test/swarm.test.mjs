// A mixed swarm over one real NATS server: two Go agents (`electhost run`
// processes) and one Node agent (agent.mjs), quorum mode, heartbeat 100 ms,
// election timeout 600 ms. The Node agent follows a Go leader, takes over
// when that leader is SIGKILLed, leads while a Go agent rejoins, and is
// SIGKILLed itself while leading; every time all live members agree on one
// new leader at a higher term, and no term has two leaders. How fast is
// logged against the design bound, not asserted: a loaded runner stretches
// it (CI pairs at load 20-40).
// Every agent has a leader value (--value): each follower reports its
// leader's across runtimes, and a proclaim at the Node leader reaches the Go
// followers in the same term.
import test from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { buildElecthost, startBroker, startGo, startNode, agreed, waitFor, tempDir, requireWasm } from './helpers.mjs';

requireWasm();

const timing = { heartbeat: 100, electionTimeout: 600 };
// The design bound on a crash of the leader → every live member knows the
// same new leader: an election timeout, the ranked campaign offset (≤ 5/8
// of it), a vote round trip, and slack for a loaded 2-core machine.
// Logged with the measured failovers.
const FAILOVER_BOUND_MS = 2 * timing.electionTimeout + 1000;

test('mixed swarm: 2 electhost + 1 Node agent over NATS', { timeout: 600_000 }, async (t) => {
  const dir = tempDir('electcore-swarm-');
  const electhost = buildElecthost(dir);
  const broker = await startBroker(electhost);
  const group = 'mixed';
  const members = ['go1', 'go2', 'node1'];
  const base = { group, members, url: broker.url, timing };
  const state = (id) => path.join(dir, `state-${id}`);
  const value = (id) => `http://${id}.example:8080`;
  // valueOf waits until every member given reports leader's value v in term.
  const valueOf = (ms, leader, term, v) => waitFor(() => ms.every((m) => m.value?.leader === leader && m.value.term === term && m.value.value === v),
    60_000, `${ms.map((m) => m.id)} to report ${leader}'s value ${v}`);
  const all = [];
  const start = (m) => { all.push(m); return m; };
  t.after(async () => {
    await Promise.all(all.filter((m) => m.alive).map((m) => m.kill('SIGKILL')));
    broker.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // 1. The Go agents start (two of three are a quorum) and elect go1, the
  //    highest priority; then node1 joins and follows it.
  let go1 = start(startGo(electhost, { ...base, id: 'go1', priority: 300, stateDir: state('go1'), value: value('go1') }));
  const go2 = start(startGo(electhost, { ...base, id: 'go2', priority: 100, stateDir: state('go2'), value: value('go2') }));
  await waitFor(() => agreed([go1, go2]) === 'go1', 60_000, 'go1 and go2 to agree on go1');
  let node1 = start(startNode({ ...base, id: 'node1', priority: 200, stateDir: state('node1'), value: value('node1') }));
  await waitFor(() => agreed([go1, go2, node1]) === 'go1', 60_000, 'all three to agree on go1');
  const t1 = go1.term;
  await valueOf([go1, go2, node1], 'go1', t1, value('go1'));
  assert.ok(node1.lines.some((l) => l.event === 'leader-changed' && l.leader === 'go1'), 'node1 follows go1');
  assert.equal(node1.led.length, 0);
  t.diagnostic(`1. leader go1, term ${t1}; node1 follows`);

  // 2. SIGKILL the Go leader: node1 (next priority) and go2 agree on a new leader.
  let killedAt = Date.now();
  await go1.kill('SIGKILL');
  await waitFor(() => { const l = agreed([go2, node1]); return l && l !== 'go1'; }, 60_000, 'a new leader after go1 was killed');
  const failover1 = Date.now() - killedAt;
  await waitFor(() => agreed([go2, node1]) === 'node1', 60_000, 'node1 to lead');
  let t2 = node1.term;
  assert.ok(t2 > t1, `term ${t2} after ${t1}`);
  assert.ok(node1.led.includes(t2), `node1 led ${node1.led}`);
  t.diagnostic(`2. go1 SIGKILLed: new leader agreed after ${failover1} ms; node1 leads term ${t2} (after ${Date.now() - killedAt} ms)`);
  // The Go follower reports the Node leader's value, and a proclaim at the
  // Node leader reaches it in the same term. A lease lost to load ends
  // node1's leadership first (its own log says its lease expired): then
  // both run again under node1's next leadership (it is the better of the
  // two), at most three times; a leadership that ended any other way, a
  // proclaim that cost the term included, fails the test.
  const proclaimed = 'http://node1.example:9090';
  const reported = (v) => [go2, node1].every((m) => m.value?.leader === 'node1' && m.value.term === t2 && m.value.value === v);
  const stepDown = (term) => node1.lines.find((l) => l.event === 'stepped-down' && l.term === term);
  for (let attempt = 1; ; attempt++) {
    const term = t2;
    // node1's value: its own, or (led again after a proclaim) the proclaimed one.
    await waitFor(() => reported(value('node1')) || (attempt > 1 && reported(proclaimed)) || stepDown(term), 60_000,
      `go2 and node1 to report node1's value in term ${term}`);
    if (!stepDown(term)) {
      node1.send(`proclaim ${proclaimed}`);
      await waitFor(() => reported(proclaimed) || stepDown(term), 60_000, `go2 and node1 to report node1's proclaimed value in term ${term}`);
    }
    const down = stepDown(term);
    if (!down) break;
    assert.ok(String(down.reason).startsWith('lease expired'), `node1 stepped down from term ${term}: ${JSON.stringify(down)}`);
    assert.ok(attempt < 3, `node1 lost its lease in each of ${attempt} tries (the last: term ${term})`);
    t.diagnostic(`2b. node1 lost its lease at term ${term} (${down.reason}); again under its next leadership`);
    await waitFor(() => agreed([go2, node1]) === 'node1' && node1.term > term, 60_000, `node1 to lead again after term ${term}`);
    t2 = node1.term;
  }
  t.diagnostic(`2b. node1 proclaimed a new value; go2 reports it in the same term (${t2})`);

  // 3. go1 restarts from its persisted state (now with a lower priority, so
  //    node1 keeps leading) and follows node1.
  go1 = start(startGo(electhost, { ...base, id: 'go1', priority: 50, stateDir: state('go1'), value: value('go1') }));
  await waitFor(() => agreed([go1, go2, node1]) === 'node1', 60_000, 'all three to agree on node1');
  // go1's rejoin moved nothing: node1 kept its term, or lost it only to
  // load (its own log says its lease expired) and leads again.
  const moved = node1.lines.filter((l) => l.event === 'stepped-down' && l.term >= t2 && !String(l.reason).startsWith('lease expired'));
  assert.deepEqual(moved, [], 'node1 stepped down since go1 rejoined, other than by a lease lost to load');
  if (node1.term !== t2) t.diagnostic(`3. node1 lost its lease to load since term ${t2}; leads term ${node1.term}`);
  t2 = node1.term;
  t.diagnostic(`3. go1 rejoined and follows node1 at term ${go1.term}`);

  // 4. SIGKILL the Node leader: the two Go agents agree on a new one.
  killedAt = Date.now();
  await node1.kill('SIGKILL');
  await waitFor(() => { const l = agreed([go1, go2]); return l && l !== 'node1'; }, 60_000, 'a new leader after node1 was killed');
  const failover2 = Date.now() - killedAt;
  const t3 = go1.term;
  t.diagnostic(`4. node1 SIGKILLed: ${go1.leader} leads term ${t3}, agreed after ${failover2} ms`);
  assert.ok(t3 > t2);

  // 5. node1 restarts from its state file and follows at the new term.
  node1 = start(startNode({ ...base, id: 'node1', priority: 10, stateDir: state('node1') }));
  await waitFor(() => agreed([go1, go2, node1]), 60_000, 'node1 to follow after its restart');
  assert.ok(node1.term >= t3);
  t.diagnostic(`5. node1 restarted from its state file and follows ${node1.leader} at term ${node1.term}`);

  // Election safety across runtimes: never two leaders for one term.
  const byTerm = new Map();
  for (const m of all) {
    for (const term of m.led) {
      assert.ok(!byTerm.has(term) || byTerm.get(term) === m.id, `term ${term} led by ${byTerm.get(term)} and ${m.id}`);
      byTerm.set(term, m.id);
    }
  }
  t.diagnostic(`leaders by term: ${JSON.stringify(Object.fromEntries(byTerm))}; failover ${failover1} ms (Go leader killed), ${failover2} ms (Node leader killed), design bound ${FAILOVER_BOUND_MS} ms (logged, not asserted)`);

  // Clean stop: SIGTERM, exit 0.
  for (const m of [go1, go2, node1]) m.proc.kill('SIGTERM');
  for (const m of [go1, go2, node1]) assert.equal((await m.exited).code, 0, `${m.id} exit`);
});
