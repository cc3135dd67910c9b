// The CLI's refusals in its own words: each bad flag or input is named.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { userMessage } from '../lib/agent.mjs';

test('core refusals name the CLI flags, without the SDK prefix', () => {
  assert.equal(userMessage('Plugin-originated error: join "x": join: members: must include this agent\'s id "z"'),
    '--members: must include this agent\'s --id "z"');
  assert.equal(userMessage('Plugin-originated error: join "x": heartbeat_ms 5: want 10..600000'), '--heartbeat-ms 5: want 10..600000');
  assert.equal(userMessage('election_timeout_ms 20: want 3×heartbeat (300)..3600000'), '--election-timeout-ms 20: want 3×heartbeat (300)..3600000');
});
