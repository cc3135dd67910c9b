// electcore.mjs — load electcore.wasm in Node and step the pure core.
//
// Two engines with the same interface:
//   - ExtismCore: the module's Extism plugin exports (join, step, status)
//     through the Extism JS SDK (@extism/extism 1.0.3), coding around its two
//     bugs (see ../README.md).
//   - RawCore: the module's raw ABI (ec_input, ec_step, ...) on Node's own
//     WebAssembly + node:wasi.
// Both take and return msgp batches (MessagePack maps keyed by the Go msgp
// tag names, see core/batch.go); encodeInput/decodeOutput convert them.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { encode, decode } from '@msgpack/msgpack';

const here = path.dirname(fileURLToPath(import.meta.url));

// Command kinds (core.CommandKind) and event kinds (core.EventKind).
export const Cmd = Object.freeze({ campaign: 1, resign: 2, transfer: 3, leave: 4, 'add-member': 5, 'remove-member': 6, drain: 7, undrain: 8, proclaim: 9 });
export const EventNames = Object.freeze({
  1: 'leader-changed', 2: 'became-leader', 3: 'lease', 4: 'stepped-down',
  5: 'rejected', 6: 'joined', 7: 'left', 8: 'duplicate-id', 9: 'config', 10: 'term-spent', 11: 'value',
});

// Where electcore.wasm is: $ELECTCORE_WASM, else the repo root (`make wasm`).
export function defaultWasmPath() {
  return process.env.ELECTCORE_WASM || path.resolve(here, '..', '..', '..', 'electcore.wasm');
}

// Node 20 prints an ExperimentalWarning for node:wasi (used by both the
// Extism SDK and RawCore); keep stderr clean for the agent's JSON lines.
export function quietWasiWarning() {
  const emit = process.emitWarning;
  process.emitWarning = function (warning, ...rest) {
    const type = typeof rest[0] === 'string' ? rest[0] : rest[0]?.type;
    if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
    return emit.call(process, warning, ...rest);
  };
}

// ---- msgp batches ---------------------------------------------------------

// A standalone copy of b: the Extism SDK sends b.buffer whole and ignores
// byteOffset (bug 1), so a view into a larger buffer must never reach it.
export function standalone(b) {
  if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength && !(b instanceof Buffer)) return b;
  return new Uint8Array(b);
}

const int = (v) => Math.floor(Number(v ?? 0));

// encodeInput encodes a core.Input: { now, wall, join: [{config, state}],
// in: [{t, p}], cmd: [{k, g, to, key, value}] }. Times are integer
// milliseconds; key (add-member in a group that uses ed25519) is the new
// member's public key as bytes; value is a proclaim's new leader value.
export function encodeInput(input) {
  const m = { now: int(input.now), wall: int(input.wall) };
  m.join = (input.join ?? []).map((s) => ({ config: encodeConfig(s.config), state: encodeState(s.state) }));
  m.in = (input.in ?? []).map((x) => ({ t: x.t, p: standalone(toBytes(x.p)) }));
  m.cmd = (input.cmd ?? []).map((c) => {
    const o = { k: c.k, g: c.g, to: c.to ?? '' };
    if (c.key) o.key = standalone(toBytes(c.key));
    if (c.value !== undefined) o.value = c.value;
    return o;
  });
  return encode(m);
}

// encodeConfig copies a core.Config (msgp field names: id, group, priority,
// mode, members, heartbeat_ms, election_timeout_ms, max_drift_ppm, lease_ms,
// collect_ms, no_priority_transfer, seed, ...), dropping unset fields and
// keeping integers integers: a float would not decode on the Go side.
export function encodeConfig(c) {
  const o = {};
  for (const [k, v] of Object.entries(c)) {
    if (v === undefined || v === null || v === 0 || v === '' || v === false) continue;
    o[k] = typeof v === 'number' ? int(v) : v;
  }
  o.members = [...(c.members ?? [])];
  return o;
}

// encodeState hands back what the core last asked to persist for a group
// (core.GroupState: group, term, vote, and any field a later core adds, such
// as epoch and the configuration: conf_term, conf_index, members, keys),
// unchanged.
export function encodeState(s) {
  const o = { group: '', term: 0, vote: '', ...(s ?? {}) };
  for (const [k, v] of Object.entries(o)) if (typeof v === 'number') o[k] = int(v);
  return o;
}

function toBytes(p) {
  if (p instanceof Uint8Array) return p;
  if (typeof p === 'string') return new TextEncoder().encode(p);
  return new Uint8Array(p);
}

// decodeOutput decodes a core.Output: { persist: [{group, term, vote}],
// pub: [{t, p}], ev: [{k, g, term, leader, lease, why}], wake }.
export function decodeOutput(bytes) {
  const o = decode(bytes);
  o.persist ??= [];
  o.pub ??= [];
  o.ev ??= [];
  o.wake ??= 0;
  return o;
}

// ---- Extism engine --------------------------------------------------------

// The SDK's go-pdk blocks are never freed: after 16,383 calls every call fails
// with "cannot assign to this block" (bug 2). plugin.reset() frees them (the
// module's own memory, and so the engine and its groups, is untouched).
export const RESET_EVERY = 4096;

export class ExtismCore {
  static async load(wasmPath = defaultWasmPath()) {
    const { default: createPlugin } = await import('@extism/extism');
    const wasm = new Uint8Array(readFileSync(wasmPath)); // a standalone copy (bug 1)
    const c = new ExtismCore();
    c.make = () => createPlugin({ wasm: [{ data: wasm }] }, { useWasi: true, runInWorker: false });
    c.plugin = await c.make();
    return c;
  }

  kind = 'extism';
  resetEvery = RESET_EVERY;
  calls = 0;   // calls since the last reset
  resets = 0;  // block resets (bug 2 workaround)
  total = 0;   // calls ever

  async call(name, bytes) {
    if (this.calls >= this.resetEvery) await this.reset();
    this.calls++;
    this.total++;
    const out = await this.plugin.call(name, standalone(bytes));
    return out ? out.bytes().slice() : new Uint8Array(0);
  }

  async reset() {
    if (!(await this.plugin.reset())) throw new Error('extism: reset refused (plugin busy)');
    this.calls = 0;
    this.resets++;
  }

  // stepBytes: msgp core.Input in, msgp core.Output out.
  stepBytes(inBytes) { return this.call('step', inBytes); }
  joinBytes(inBytes) { return this.call('join', inBytes); }

  async status(group) {
    return decode(await this.call('status', new TextEncoder().encode(group)));
  }

  // renew drops the instance (after a trap) for a fresh one with no groups.
  async renew() {
    try { await this.plugin.close(); } catch { /* poisoned anyway */ }
    this.plugin = await this.make();
    this.calls = 0;
  }

  async close() { await this.plugin.close(); }

  // A plugin-originated error is an error code (bad input, rejected join): the
  // instance is fine. Anything else is a trap: renew and rejoin.
  static isTrap(err) { return !String(err?.message).startsWith('Plugin-originated error:'); }
}

// ---- raw ABI engine (node:wasi) -------------------------------------------

export class RawCore {
  static async load(wasmPath = defaultWasmPath()) {
    const { WASI } = await import('node:wasi');
    const module = await WebAssembly.compile(readFileSync(wasmPath));
    const c = new RawCore();
    c.make = async () => {
      // No preopens, no args, no env: the module gets nothing but a clock and
      // random numbers for the Go runtime.
      const wasi = new WASI({ version: 'preview1', args: [], env: {}, preopens: {}, returnOnExit: true });
      const imports = { wasi_snapshot_preview1: wasi.wasiImport };
      for (const imp of WebAssembly.Module.imports(module)) {
        if (imp.module === 'wasi_snapshot_preview1') continue;
        // The Extism kernel imports (used only by the Extism exports): stubs.
        imports[imp.module] ??= {};
        imports[imp.module][imp.name] = () => { throw new Error(`${imp.module}.${imp.name} called through the raw ABI`); };
      }
      const instance = await WebAssembly.instantiate(module, imports);
      wasi.initialize(instance); // runs _initialize: must come first
      return instance;
    };
    await c.renew();
    return c;
  }

  kind = 'raw';
  total = 0;
  resets = 0;

  async renew() {
    this.inst = await this.make();
    this.x = this.inst.exports;
    if (this.x.ec_abi_version() !== 1) throw new Error(`electcore raw ABI ${this.x.ec_abi_version()}, want 1`);
  }

  write(bytes) {
    const ptr = this.x.ec_input(bytes.length);
    if (ptr === 0) throw new Error(`input of ${bytes.length} bytes too large`);
    new Uint8Array(this.x.memory.buffer, ptr, bytes.length).set(bytes);
  }

  result(r) {
    if (r < 0n) {
      const e = this.x.ec_error();
      const msg = new TextDecoder().decode(this.view(e));
      const err = new Error(`electcore error ${-r}: ${msg}`);
      err.code = Number(-r);
      throw err;
    }
    return this.view(r).slice();
  }

  view(packed) {
    const ptr = Number(BigInt.asUintN(64, packed) >> 32n);
    const len = Number(packed & 0xffffffffn);
    return new Uint8Array(this.x.memory.buffer, ptr, len);
  }

  async stepBytes(inBytes) { this.total++; this.write(inBytes); return this.result(this.x.ec_step(inBytes.length)); }
  async joinBytes(inBytes) { this.total++; this.write(inBytes); return this.result(this.x.ec_join(inBytes.length)); }
  async status(group) {
    const b = new TextEncoder().encode(group);
    this.write(b);
    return decode(this.result(this.x.ec_status(b.length)));
  }
  async close() {}

  static isTrap(err) { return err?.code === undefined; }
}

export async function loadCore(kind = 'extism', wasmPath = defaultWasmPath()) {
  if (kind === 'extism') return ExtismCore.load(wasmPath);
  if (kind === 'raw') return RawCore.load(wasmPath);
  throw new Error(`engine ${kind}: want extism or raw`);
}

// ---- NATS subjects ---------------------------------------------------------

// natsSubject maps a topic to its NATS subject exactly as the Go transport
// (transport/nats.Subject): plain topics as they are, anything else base64url.
export function natsSubject(topic) {
  const prefix = 'electcore.enc.';
  const plain = topic !== '' && !topic.startsWith(prefix) && !topic.startsWith('.') && !topic.endsWith('.') &&
    !topic.includes('..') && /^[A-Za-z0-9_:.\-]+$/.test(topic);
  if (plain) return topic;
  return prefix + Buffer.from(topic, 'utf8').toString('base64url');
}

export const topicOf = (group) => `election:${group}`;
