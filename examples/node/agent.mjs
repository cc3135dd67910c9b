#!/usr/bin/env node
// A Node.js electcore agent: joins one election group over NATS as a full
// member (it votes, follows and can lead), running electcore.wasm through the
// Extism JS SDK (or node:wasi with --engine raw). Prints one JSON line per
// event on stdout; reads commands on stdin (resign, campaign, transfer ID,
// add ID [BASE64-KEY], remove ID, proclaim VALUE, status, quit). See README.md.
// --value V is announced with this agent's leadership; a 'value' event
// reports the leader's value as this agent sees it.
//
//   node agent.mjs --group G --id node1 --members go1,go2,node1 \
//        --nats nats://127.0.0.1:4222 [--state-dir D] [--priority N] \
//        [--heartbeat-ms 100 --election-timeout-ms 600] [--engine extism|raw]

import { parseArgs } from 'node:util';
import readline from 'node:readline';
import { quietWasiWarning, loadCore, natsSubject, defaultWasmPath, RESET_EVERY } from './lib/electcore.mjs';
import { Agent, FileStore, MemStore, userMessage } from './lib/agent.mjs';

quietWasiWarning();

const usage = `usage: node agent.mjs --group G --id ID --members a,b,c [--nats URL] [--state-dir D]
  [--priority N] [--mode quorum|bully] [--heartbeat-ms 500] [--election-timeout-ms 2000]
  [--engine extism|raw] [--wasm electcore.wasm] [--join] [--value V] [--verbose]`;

let opts;
try {
  ({ values: opts } = parseArgs({
    options: {
      group: { type: 'string' }, id: { type: 'string' }, members: { type: 'string', default: '' },
      nats: { type: 'string', default: 'nats://127.0.0.1:4222' }, 'state-dir': { type: 'string' },
      priority: { type: 'string' }, mode: { type: 'string', default: 'quorum' },
      'heartbeat-ms': { type: 'string' }, 'election-timeout-ms': { type: 'string' },
      engine: { type: 'string', default: 'extism' }, wasm: { type: 'string' },
      value: { type: 'string', default: '' },
      join: { type: 'boolean', default: false }, verbose: { type: 'boolean', default: false }, help: { type: 'boolean', default: false },
    },
  }));
} catch (e) {
  console.error(`agent: ${e.message}\n${usage}`);
  process.exit(2);
}
if (opts.help) { console.log(usage); process.exit(0); }
if (!opts.group || !opts.id) { console.error(`agent: --group and --id are required\n${usage}`); process.exit(2); }

const t0 = Date.now();
const emit = (obj) => process.stdout.write(JSON.stringify({ ms: Date.now() - t0, id: opts.id, ...obj }) + '\n');
const fail = (code, msg) => { console.error(`agent: ${msg}`); process.exit(code); };

const config = {
  id: opts.id, group: opts.group, mode: opts.mode,
  members: opts.members.split(',').map((s) => s.trim()).filter(Boolean),
  priority: opts.priority ? Number(opts.priority) : 0,
  heartbeat_ms: opts['heartbeat-ms'] ? Number(opts['heartbeat-ms']) : 0,
  election_timeout_ms: opts['election-timeout-ms'] ? Number(opts['election-timeout-ms']) : 0,
  await_config: opts.join, // wait to be added: --members are whom it learns the configuration from
  value: opts.value, // announced while this agent leads (at most 1024 bytes)
};

let core, nc, store;
try {
  core = await loadCore(opts.engine, opts.wasm ?? defaultWasmPath());
} catch (e) { fail(3, `loading electcore.wasm: ${e.message}`); }
try {
  store = opts['state-dir'] ? new FileStore(opts['state-dir']) : new MemStore();
} catch (e) { fail(3, `--state-dir: ${e.message}`); }

const { connect } = await import('nats');
try {
  nc = await connect({ servers: opts.nats.split(','), name: `electcore-node ${opts.id}`, maxReconnectAttempts: -1, reconnectTimeWait: 250, timeout: 5000 });
} catch (e) { fail(4, `NATS ${opts.nats}: ${e.message}`); }

const transport = {
  publish(topic, payload) { nc.publish(natsSubject(topic), payload); },
  async subscribe(topic, deliver) {
    const sub = nc.subscribe(natsSubject(topic));
    (async () => { for await (const m of sub) deliver(m.data.slice()); })();
    await nc.flush(); // the subscription is live at the server before we join
  },
};

let leading = 0; // the term this agent leads (the fencing token), 0 if none
const agent = new Agent({
  core, transport, store,
  onEvent(ev) {
    if (ev.event === 'lease' && !opts.verbose) return;
    if (ev.event === 'became-leader') leading = ev.term;
    if (ev.event === 'stepped-down') leading = 0;
    const o = { event: ev.event, group: ev.group, term: ev.term };
    if (ev.event === 'leader-changed' || ev.event === 'became-leader') o.leader = ev.leader || (ev.event === 'became-leader' ? opts.id : '');
    if (ev.lease_until) o.lease_until = ev.lease_until;
    if (ev.event === 'value') { o.leader = ev.leader; o.value = ev.value; }
    if (ev.reason) o.reason = ev.reason;
    emit(o);
  },
  onError(err) { emit({ event: 'error', error: err.message }); },
});

try {
  await agent.join(config);
} catch (e) { fail(2, userMessage(e.message)); }
emit({ event: 'ready', group: opts.group, engine: core.kind, members: config.members, wasm: opts.wasm ?? defaultWasmPath() });

async function stop(code = 0) {
  await agent.close({ resign: true });
  await nc.drain().catch(() => {});
  emit({ event: 'stopped', steps: agent.stats.steps, calls: core.total, resets: core.resets, traps: agent.stats.traps });
  process.exit(code);
}
process.on('SIGTERM', () => stop(0));
process.on('SIGINT', () => stop(0));

// Commands on stdin, one per line.
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', async (line) => {
  const [cmd, arg, ...rest] = line.trim().split(/\s+/);
  try {
    switch (cmd) {
      case 'resign': case 'campaign': case 'leave':
        await agent.command(cmd, opts.group); emit({ event: 'command', command: cmd }); break;
      case 'transfer':
        await agent.command('transfer', opts.group, arg ?? ''); emit({ event: 'command', command: cmd, to: arg }); break;
      case 'proclaim': { // proclaim VALUE (the rest of the line): a 'value' event follows, or 'rejected'
        const value = line.trim().slice('proclaim'.length).trim();
        await agent.proclaim(opts.group, value); emit({ event: 'command', command: cmd, value }); break;
      }
      case 'add': case 'remove': { // add ID [BASE64-KEY], remove ID: done once a config event says committed
        const key = cmd === 'add' && rest[0] ? new Uint8Array(Buffer.from(rest[0], 'base64')) : undefined;
        await agent.command(`${cmd}-member`, opts.group, arg ?? '', key); emit({ event: 'command', command: cmd, member: arg }); break;
      }
      case 'status': {
        const st = await agent.status(opts.group);
        emit({ event: 'status', role: ['follower', 'pre-candidate', 'candidate', 'leader'][st.role] ?? st.role, leader: st.leader,
          term: st.term, vote: st.vote, priority: st.priority, members: (st.members ?? []).map((m) => m.id),
          conf_index: st.conf_index, conf_committed: st.conf_committed, voter: st.voter, value: st.value ?? '', leading, steps: agent.stats.steps, calls: core.total,
          resets: core.resets, reset_every: core.kind === 'extism' ? RESET_EVERY : 0 });
        break;
      }
      case 'quit': await stop(0); break;
      case '': case undefined: break;
      default: emit({ event: 'error', error: `unknown command ${cmd}` });
    }
  } catch (e) { emit({ event: 'error', error: e.message }); }
});
rl.on('close', () => {}); // stdin closed (e.g. </dev/null): keep running until a signal
