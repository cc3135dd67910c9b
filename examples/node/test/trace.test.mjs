// Byte-identical check: the recorded input trace (testdata/trace-in.msgp, made
// and verified by trace_test.go with the Go core) gives, in Node, exactly
// the output bytes the Go core gave (testdata/trace-out.msgp) — on the Extism
// SDK and on node:wasi, fed the Go-encoded batches or batches re-encoded by
// this example's own encoder.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { decode } from '@msgpack/msgpack';
import { ExtismCore, RawCore, quietWasiWarning, encodeInput } from '../lib/electcore.mjs';
import { exampleDir, wasmPath, requireWasm } from './helpers.mjs';

quietWasiWarning();
requireWasm();

const frames = (f) => decode(readFileSync(path.join(exampleDir, 'testdata', f)));
const ins = frames('trace-in.msgp');
const want = frames('trace-out.msgp');

const hex = (b) => Buffer.from(b).toString('hex');

async function check(core, reencode) {
  assert.equal(ins.length, want.length);
  for (let i = 0; i < ins.length; i++) {
    const input = reencode ? encodeInput(decode(ins[i])) : ins[i];
    const got = await core.stepBytes(input);
    if (Buffer.compare(Buffer.from(got), Buffer.from(want[i])) !== 0) {
      assert.fail(`batch ${i}: output differs from the Go core's\n got ${hex(got)}\nwant ${hex(want[i])}`);
    }
  }
}

for (const [name, Core] of [['Extism SDK', ExtismCore], ['node:wasi raw ABI', RawCore]]) {
  for (const reencode of [false, true]) {
    test(`${name}: ${ins.length} batches ${reencode ? 're-encoded by encodeInput' : 'as recorded'} give the Go core's bytes`, async () => {
      const core = await Core.load(wasmPath);
      await check(core, reencode);
      await core.close();
    });
  }
}
