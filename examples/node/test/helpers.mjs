// Test helpers: build and run electhost, a NATS broker, the Node agent, and a
// small in-process virtual-time swarm of cores.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { encodeInput, decodeOutput } from '../lib/electcore.mjs';

export const exampleDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const repoRoot = path.resolve(exampleDir, '..', '..');
export const wasmPath = process.env.ELECTCORE_WASM || path.join(repoRoot, 'electcore.wasm');

export function tempDir(prefix = 'electcore-node-') {
  return mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function requireWasm() {
  if (!existsSync(wasmPath)) throw new Error(`${wasmPath} missing: run \`make wasm\` at the repo root first`);
}

// buildElecthost builds cmd/electhost into dir ($ELECTHOST overrides).
export function buildElecthost(dir) {
  if (process.env.ELECTHOST) return process.env.ELECTHOST;
  const out = path.join(dir, 'electhost');
  execFileSync('go', ['build', '-o', out, './cmd/electhost'], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] });
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// waitFor polls cond every 10 ms until it returns a truthy value.
export async function waitFor(cond, timeoutMs, what) {
  const start = Date.now();
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

// startBroker runs `electhost broker --listen 127.0.0.1:0` and returns its URL.
export async function startBroker(electhost) {
  const p = spawn(electhost, ['broker', '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const rl = readline.createInterface({ input: p.stdout });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('broker did not print its URL')), 10000);
    rl.once('line', (l) => { clearTimeout(timer); resolve(l.trim()); });
    p.once('exit', (c) => reject(new Error(`broker exited ${c}`)));
  });
  return { url, proc: p, stop: () => p.kill('SIGTERM') };
}

// Member is one agent process whose JSON lines are followed: leader and term
// as it knows them, and every term it led.
export class Member {
  constructor(id, runtime, proc, stream) {
    Object.assign(this, { id, runtime, proc, leader: '', term: 0, led: [], lines: [], alive: true, value: null });
    this.exited = new Promise((r) => proc.once('exit', (code, sig) => { this.alive = false; r({ code, sig }); }));
    readline.createInterface({ input: stream }).on('line', (l) => this.line(l));
  }

  line(l) {
    let o;
    try { o = JSON.parse(l); } catch { return; }
    o.at = Date.now();
    this.lines.push(o);
    if (this.runtime === 'go') {
      if (o.msg === 'leader') { this.leader = o.leader; this.term = o.term; }
      if (o.msg === 'no leader known') { this.leader = ''; this.term = o.term; }
      if (o.msg === 'started leading') this.led.push(o.term);
      if (o.msg === 'leader value') this.value = { leader: o.leader, term: o.term, value: o.value };
    } else {
      if (o.event === 'leader-changed') { this.leader = o.leader; this.term = o.term; }
      if (o.event === 'became-leader') { this.led.push(o.term); this.leader = this.id; this.term = o.term; }
      if (o.event === 'value') this.value = { leader: o.leader, term: o.term, value: o.value };
    }
  }

  send(cmd) { this.proc.stdin?.write(cmd + '\n'); }
  kill(sig = 'SIGKILL') { this.proc.kill(sig); return this.exited; }
}

export function startGo(electhost, { id, group, members, url, priority, stateDir, timing, value = '' }) {
  const args = ['run', '--group', group, '--id', id, '--members', members.join(','), '--transport', 'nats',
    '--broker', url, '--priority', String(priority), '--state-dir', stateDir, '--wasm', wasmPath,
    '--heartbeat', `${timing.heartbeat}ms`, '--election-timeout', `${timing.electionTimeout}ms`, '--json', '--value', value];
  const p = spawn(electhost, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Member(id, 'go', p, p.stderr);
}

export function startNode({ id, group, members, url, priority, stateDir, timing, engine = 'extism', value = '' }) {
  const args = [path.join(exampleDir, 'agent.mjs'), '--group', group, '--id', id, '--members', members.join(','),
    '--nats', url, '--priority', String(priority), '--state-dir', stateDir, '--wasm', wasmPath, '--engine', engine,
    '--heartbeat-ms', String(timing.heartbeat), '--election-timeout-ms', String(timing.electionTimeout), '--value', value];
  const p = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Member(id, 'node', p, p.stdout);
}

// agreed returns the leader if every member given knows the same leader at
// the same term, else ''.
export function agreed(members) {
  const [a, ...rest] = members;
  if (!a.leader) return '';
  return rest.every((m) => m.leader === a.leader && m.term === a.term) ? a.leader : '';
}

// simulate runs a 3-member group on the given cores in virtual time: n1 (the
// first core) is stepped every virtual millisecond, the others when a message
// or their timer is due; every publish reaches every member (itself too, as
// NATS echoes it) `latency` ms later. It stops once core 0 made `calls` calls
// and returns every output of every core (bytes) and the events seen.
export async function simulate(cores, { calls, latency = 15, resignAt = 10_000, timeStep } = {}) {
  const ids = ['n1', 'n2', 'n3'];
  const group = 'sim';
  const nodes = ids.map((id, i) => ({
    id, core: cores[i], wake: 0, inbox: [], cmds: [], outs: [], stepMs: [],
    join: [{ config: { id, group, members: ids, heartbeat_ms: 100, election_timeout_ms: 600, priority: 30 - 10 * i },
      state: { group: '', term: 0, vote: '' } }],
  }));
  const air = [];
  const events = [];
  for (let now = 0; nodes[0].core.total < calls; now++) {
    if (now === resignAt) for (const n of nodes) n.cmds.push({ k: 2, g: group, to: '' });
    for (let i = air.length - 1; i >= 0; i--) {
      if (air[i].at <= now) { nodes[air[i].to].inbox.push(air[i].m); air.splice(i, 1); }
    }
    for (const [i, n] of nodes.entries()) {
      const due = i === 0 || n.join.length || n.inbox.length || n.cmds.length || (n.wake && n.wake <= now);
      if (!due) continue;
      const bytes = encodeInput({ now, wall: 0, join: n.join, in: n.inbox, cmd: n.cmds });
      n.join = []; n.inbox = []; n.cmds = [];
      const t = timeStep ? performance.now() : 0;
      const ob = await n.core.stepBytes(bytes);
      if (timeStep) n.stepMs.push(performance.now() - t);
      n.outs.push(ob);
      const out = decodeOutput(ob);
      for (const m of out.pub) for (let to = 0; to < 3; to++) air.push({ at: now + latency, to, m: { t: m.t, p: m.p } });
      for (const e of out.ev) events.push({ now, id: n.id, ...e });
      n.wake = out.wake;
    }
  }
  return { nodes, events };
}
