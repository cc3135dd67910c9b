// agent.mjs — an election agent around one electcore core (ExtismCore or
// RawCore): batches what arrived into one step, applies the output through
// Driver (driver.mjs, the Go hosts' core.Driver in JavaScript: persist, then
// publish, then events), and sleeps until the next message or the core's
// wake-up time. Single-threaded: one step at a time.

import fs from 'node:fs';
import path from 'node:path';
import { encodeInput, decodeOutput, encodeState, Cmd, EventNames, topicOf } from './electcore.mjs';
import { Driver } from './driver.mjs';

// FileStore keeps each group's persisted core.GroupState ({group, term, vote,
// epoch, conf_term, conf_index, members, keys, ...} as the core handed it;
// the ed25519 keys, bytes, as base64) in <dir>/<group>.json,
// written atomically (temp file, fsync, rename, fsync of the directory).
// The directory is locked against a second live agent (<dir>/.lock holds the
// owner's pid; a lock whose process is gone is taken over).
export class FileStore {
  constructor(dir) {
    this.dir = dir;
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const lock = path.join(dir, '.lock');
    for (let attempt = 0; ; attempt++) {
      try {
        fs.writeFileSync(lock, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
        break;
      } catch (e) {
        if (e.code !== 'EEXIST' || attempt > 0) throw e;
        const pid = Number(fs.readFileSync(lock, 'utf8'));
        if (pid && pid !== process.pid && alive(pid)) throw new Error(`${dir} is in use by process ${pid}`);
        fs.rmSync(lock, { force: true }); // stale: its owner is gone
      }
    }
    this.lock = lock;
  }
  release() { fs.rmSync(this.lock, { force: true }); }
  file(group) { return path.join(this.dir, `${encodeURIComponent(group)}.json`); }
  load(group) {
    let text;
    try { text = fs.readFileSync(this.file(group), 'utf8'); } catch (e) {
      if (e.code === 'ENOENT') return null;
      throw e;
    }
    const s = JSON.parse(text); // corrupt state must stop the agent, not reset its vote
    if (s.group !== group || !Number.isSafeInteger(s.term) || typeof s.vote !== 'string' ||
        (s.keys !== undefined && !(Array.isArray(s.keys) && s.keys.every((k) => typeof k === 'string')))) {
      throw new Error(`state file ${this.file(group)} is unusable`);
    }
    if (s.keys) s.keys = s.keys.map((k) => new Uint8Array(Buffer.from(k, 'base64')));
    return s;
  }
  save(state) {
    const file = this.file(state.group);
    const tmp = `${file}.tmp`;
    const fd = fs.openSync(tmp, 'w', 0o600);
    try {
      const keys = state.keys?.map((k) => Buffer.from(k).toString('base64'));
      fs.writeSync(fd, JSON.stringify(keys ? { ...state, keys } : state) + '\n');
      fs.fsyncSync(fd);
    } finally { fs.closeSync(fd); }
    fs.renameSync(tmp, file);
    const dfd = fs.openSync(this.dir, 'r');
    try { fs.fsyncSync(dfd); } finally { fs.closeSync(dfd); }
  }
}

function alive(pid) {
  try { process.kill(pid, 0); return true; } catch (e) { return e.code === 'EPERM'; }
}

// MemStore: tests only (a restarted process forgets its votes).
export class MemStore {
  m = new Map();
  load(group) { return this.m.get(group) ?? null; }
  save(state) { this.m.set(state.group, { ...state }); }
  release() {}
}

// A monotonic millisecond clock (never the wall clock).
export const monotonicMs = () => Math.floor(performance.now());

export class Agent {
  // core: ExtismCore or RawCore; transport: {publish(topic, bytes), subscribe(topic, cb(bytes))};
  // onEvent(ev) gets {event, group, term, leader, lease_until, reason, ...}:
  // a 'value' event's value is the leader's value (config.value, proclaim).
  constructor({ core, transport, store = new MemStore(), clock = monotonicMs, onEvent = () => {}, onError = () => {} }) {
    Object.assign(this, { core, transport, store, clock, onEvent, onError });
    this.groups = new Map(); // group -> config
    this.leading = new Map(); // group -> the term this agent leads (the fencing token)
    this.inbox = [];
    this.cmds = [];
    this.queue = Promise.resolve(); // serialises calls into the core
    this.timer = null;
    this.wakeAt = 0;
    this.pending = false;
    this.closed = false;
    this.stats = { steps: 0, in: 0, out: 0, traps: 0, persistErrors: 0, held: 0 };
    this.driver = new Driver({
      save: (s) => this.store.save(encodeState(s)),
      publish: (m) => {
        try { this.transport.publish(m.t, m.p); this.stats.out++; } catch (err) { this.onError(err); }
      },
      event: (ev) => {
        if (ev.k === 2) this.leading.set(ev.g, ev.term);
        if (ev.k === 4 || ev.k === 7) this.leading.delete(ev.g);
        if (ev.k === 7) this.groups.delete(ev.g);
        this.onEvent({ event: EventNames[ev.k] ?? `kind-${ev.k}`, group: ev.g, term: ev.term, leader: ev.leader,
          lease_until: ev.lease, reason: ev.why, member: ev.member, members: ev.members, conf_index: ev.conf_index, value: ev.value });
      },
    });
  }

  serial(fn) {
    const p = this.queue.then(fn);
    this.queue = p.catch(() => {});
    return p;
  }

  // join subscribes to the group's topic, then joins it with the persisted
  // state (none: a first start). Rejects if the core refuses the config.
  async join(config) {
    const group = config.group;
    if (this.groups.has(group)) throw new Error(`group ${group} already joined`);
    const state = this.store.load(group) ?? { group: '', term: 0, vote: '' };
    await this.transport.subscribe(topicOf(group), (payload) => this.deliver(topicOf(group), payload));
    await this.serial(async () => {
      const now = this.clock();
      const bytes = encodeInput({ now, wall: Date.now(), join: [{ config, state }] });
      const out = decodeOutput(await this.core.joinBytes(bytes));
      this.groups.set(group, config);
      this.apply(out, now);
    });
  }

  deliver(topic, payload) {
    if (this.closed) return;
    this.inbox.push({ t: topic, p: payload });
    this.kick();
  }

  // command queues a command (Cmd's names or numbers); key: add-member's
  // ed25519 public key (bytes) in a group that uses ed25519.
  command(kind, group, to = '', key = undefined) {
    this.cmds.push({ k: typeof kind === 'number' ? kind : Cmd[kind], g: group, to, key });
    return this.serial(() => this.step()); // resolves once the command was stepped
  }

  // proclaim makes value this leader's value without an election (refused,
  // as a 'rejected' event, unless this agent leads).
  proclaim(group, value) {
    this.cmds.push({ k: Cmd.proclaim, g: group, to: '', value });
    return this.serial(() => this.step());
  }

  kick() {
    if (this.pending || this.closed) return;
    this.pending = true;
    setImmediate(() => { this.pending = false; this.serial(() => this.step()); });
  }

  async step() {
    if (this.closed && this.cmds.length === 0) return;
    const now = this.clock();
    const input = { now, wall: Date.now(), in: this.inbox.splice(0), cmd: this.cmds.splice(0) };
    this.stats.in += input.in.length;
    let out;
    try {
      out = decodeOutput(await this.core.stepBytes(encodeInput(input)));
    } catch (err) {
      if (!this.core.constructor.isTrap(err)) { this.onError(err); return; }
      await this.recover(err);
      return;
    }
    this.apply(out, now);
  }

  // recover replaces a trapped instance and rejoins every group from the
  // persisted state (the messages of the failed batch are lost, as on a lossy bus).
  async recover(err) {
    this.stats.traps++;
    this.onError(new Error(`wasm trap, re-instantiating: ${err.message}`));
    await this.core.renew();
    const now = this.clock();
    const join = [...this.groups.values()].map((config) => ({
      config, state: this.store.load(config.group) ?? { group: '', term: 0, vote: '' },
    }));
    this.apply(decodeOutput(await this.core.stepBytes(encodeInput({ now, wall: Date.now(), join }))), now);
  }

  apply(out, now) {
    this.stats.steps++;
    // Persist, publish, events: the contract's order (driver.mjs). A state
    // that could not be saved holds its group's publishes, and a leadership
    // resting on it, until a later save succeeds.
    const { held, errors } = this.driver.apply(out);
    this.stats.held += held;
    this.stats.persistErrors += errors.length;
    for (const err of errors) {
      this.onError(new Error(`persist failed; the group's messages are held until a save succeeds: ${err.message}`));
    }
    // Wake up at out.wake (0: no timer).
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (out.wake > 0 && !this.closed) {
      this.wakeAt = out.wake;
      this.timer = setTimeout(() => { this.timer = null; this.serial(() => this.step()); }, Math.max(0, out.wake - now));
    }
  }

  status(group) { return this.serial(() => this.core.status(group)); }

  // close resigns and leaves every group (resign=false: leave only, e.g. to
  // simulate a crash use process.exit instead), then stops stepping.
  async close({ resign = true } = {}) {
    for (const g of this.groups.keys()) {
      if (resign && this.leading.has(g)) this.cmds.push({ k: Cmd.resign, g, to: '' });
      this.cmds.push({ k: Cmd.leave, g, to: '' });
    }
    await this.serial(() => this.step());
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.queue;
    this.store.release?.();
  }
}

// userMessage turns a refusal from the core, as the SDK reports it
// ('Plugin-originated error: join "x": join: members: must include ...'),
// into the CLI's words: no SDK prefix, no repeated "join", and the core's
// config field names as this CLI's flags.
export function userMessage(msg) {
  let m = String(msg).replace(/^Plugin-originated error: /, '').replace(/^join "[^"]*": (join: )?/, '');
  const flags = [
    [/^heartbeat_ms /, '--heartbeat-ms '], [/^election_timeout_ms /, '--election-timeout-ms '],
    [/^lease_ms /, '--lease-ms '], [/^members: /, '--members: '], [/^(id|group|mode|priority)\b/, '--$1'],
  ];
  for (const [re, flag] of flags) {
    if (re.test(m)) { m = m.replace(re, flag); break; }
  }
  return m.replace(/this agent's id/, "this agent's --id");
}
