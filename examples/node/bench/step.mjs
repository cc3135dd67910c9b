// step.mjs — time electcore.wasm steps in Node, for the Go benchmark
// BenchmarkStep of internal/wasmhost (impl=node-raw, impl=node-extism), which
// writes the batches, runs this script and reports what it prints.
//
//   node bench/step.mjs ENGINE FRAMES STEPS
//
// ENGINE is raw (node:wasi, raw ABI) or extism (@extism/extism). FRAMES is a
// msgpack array of three arrays of msgp batches: setup inputs, loop inputs,
// and the outputs the Go host (wazero) returned for the loop inputs' first
// pass. The setup batches are stepped once; then the loop batches, cycled:
// the first pass must give the Go host's bytes exactly, then STEPS steps are
// timed after a warm-up (V8 compiles hot wasm functions in tiers). Prints
// {"ns_per_step": N} on stdout.
import { readFileSync } from 'node:fs';
import { decode } from '@msgpack/msgpack';
import { loadCore, quietWasiWarning } from '../lib/electcore.mjs';

quietWasiWarning();
const [engine, framesPath, stepsArg] = [process.argv[2], process.argv[3], process.argv[4]];
const steps = Number(stepsArg);
if (!['raw', 'extism'].includes(engine) || !framesPath || !(steps > 0)) {
  console.error('usage: node bench/step.mjs raw|extism FRAMES STEPS');
  process.exit(2);
}
const [setup, loop, want] = decode(readFileSync(framesPath));
const core = await loadCore(engine);
for (const b of setup) await core.stepBytes(b);
for (let i = 0; i < loop.length; i++) {
  const got = await core.stepBytes(loop[i]);
  if (Buffer.compare(Buffer.from(got), Buffer.from(want[i])) !== 0) {
    console.error(`loop batch ${i}: output differs from the Go host's`);
    process.exit(1);
  }
}
const warmup = Math.min(steps, 2000);
for (let i = 0; i < warmup; i++) await core.stepBytes(loop[i % loop.length]);
const t0 = process.hrtime.bigint();
for (let i = 0; i < steps; i++) await core.stepBytes(loop[i % loop.length]);
const ns = Number(process.hrtime.bigint() - t0);
await core.close();
console.log(JSON.stringify({ ns_per_step: ns / steps }));
