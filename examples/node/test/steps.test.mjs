// 20,000 step calls through the Extism SDK (past its 16,383-call block limit)
// and the same run on the raw ABI (node:wasi): identical bytes.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { ExtismCore, RawCore, RESET_EVERY, quietWasiWarning, encodeInput } from '../lib/electcore.mjs';
import { simulate, wasmPath, requireWasm } from './helpers.mjs';

quietWasiWarning();
requireWasm();

const CALLS = 20_000;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function digest(outs) {
  const h = createHash('sha256');
  for (const o of outs) h.update(o);
  return h.digest('hex');
}

test('Extism SDK: 20,000 steps of a live election, resetting blocks every 4,096 calls', async (t) => {
  const ex = await Promise.all([1, 2, 3].map(() => ExtismCore.load(wasmPath)));
  const raw = await Promise.all([1, 2, 3].map(() => RawCore.load(wasmPath)));
  const start = performance.now();
  const a = await simulate(ex, { calls: CALLS, timeStep: true });
  const exMs = performance.now() - start;
  const b = await simulate(raw, { calls: CALLS, timeStep: true });

  assert.ok(ex[0].total >= CALLS, `n1 made ${ex[0].total} calls`);
  assert.ok(ex[0].resets >= Math.floor(CALLS / RESET_EVERY) - 1, `n1 reset ${ex[0].resets} times`);
  // The election worked all along: leaders elected before and after the resign at 10 s.
  const led = a.events.filter((e) => e.k === 2);
  assert.ok(led.length >= 2, `became-leader events: ${JSON.stringify(led)}`);
  assert.ok(led.some((e) => e.now > 10_000), 'a new leader after the resign at 10 s');
  const st = await Promise.all(ex.map((c) => c.status('sim')));
  assert.ok(st.every((s) => s.leader && s.leader === st[0].leader && s.term === st[0].term), `status ${JSON.stringify(st.map((s) => [s.leader, s.term]))}`);

  // The same inputs on node:wasi's raw ABI give the same bytes.
  for (let i = 0; i < 3; i++) {
    assert.equal(a.nodes[i].outs.length, b.nodes[i].outs.length);
    assert.equal(digest(a.nodes[i].outs), digest(b.nodes[i].outs), `${a.nodes[i].id}: extism and raw outputs differ`);
  }
  const exMed = median(a.nodes[0].stepMs) * 1000;
  const rawMed = median(b.nodes[0].stepMs) * 1000;
  t.diagnostic(`n1: ${ex[0].total} Extism calls, ${ex[0].resets} resets; median step ${exMed.toFixed(1)} µs (Extism), ${rawMed.toFixed(1)} µs (raw node:wasi); whole Extism run ${exMs.toFixed(0)} ms`);
  await Promise.all(ex.map((c) => c.close()));
});

test('Extism SDK 1.0.3 without the reset workaround fails near 16,383 calls', async (t) => {
  const c = await ExtismCore.load(wasmPath);
  c.resetEvery = Infinity;
  const join = encodeInput({ now: 0, join: [{ config: { id: 'a', group: 'g', members: ['a', 'b', 'c'] } }] });
  await c.joinBytes(join);
  let failedAt = -1;
  for (let i = 1; i < 17_000; i++) {
    try {
      await c.stepBytes(encodeInput({ now: i }));
    } catch (err) {
      failedAt = i;
      assert.match(err.message, /cannot assign to this block/);
      break;
    }
  }
  if (failedAt < 0) {
    t.diagnostic('this @extism/extism frees blocks itself: the periodic reset is no longer needed (but harmless)');
    return;
  }
  t.diagnostic(`without plugin.reset() call ${failedAt + 1} failed (as docs/go-wasm.md says)`);
  assert.ok(failedAt > 16_000 && failedAt < 16_500, `failed at ${failedAt}`);
  // And a reset brings the same plugin, with its engine state, back.
  await c.reset();
  await c.stepBytes(encodeInput({ now: 17_000 }));
  const st = await c.status('g');
  assert.equal(st.id, 'a');
  await c.close();
});
