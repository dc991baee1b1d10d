// Error paths the SDK maps to typed errors (docs/wire/e2b-api.md §2.1, docs/wire/envd.md §3.4, §3.5):
// authentication, unknown template, killed sandboxes (mid-stream and after).

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  AuthenticationError,
  FileNotFoundError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from 'e2b'
import { CONCURRENCY, SUITE_KEY, TEMPLATE, createSandbox, rejectsWith, uniq, waitFor } from './helpers.mjs'

const WRONG_KEY = 'e2b_' + '0123456789abcdef'.repeat(2) + '01234567'
const KILLED = /The sandbox was killed or reached its end of life while the request was in flight/

describe('errors', { concurrency: CONCURRENCY }, () => {
  test('a wrong API key gives AuthenticationError on every control-plane call', async (t) => {
    assert.notEqual(WRONG_KEY, process.env.E2B_API_KEY)
    await rejectsWith(
      Sandbox.create(TEMPLATE, { apiKey: WRONG_KEY, metadata: { [SUITE_KEY]: 'js' } }),
      AuthenticationError
    )
    await rejectsWith(Sandbox.list({ apiKey: WRONG_KEY }).nextItems(), AuthenticationError)

    // Against an existing sandbox, so a 404 cannot stand in for the 401.
    const sbx = await createSandbox(t)
    await rejectsWith(Sandbox.getInfo(sbx.sandboxId, { apiKey: WRONG_KEY }), AuthenticationError)
    await rejectsWith(Sandbox.kill(sbx.sandboxId, { apiKey: WRONG_KEY }), AuthenticationError)
    await rejectsWith(
      Sandbox.setTimeout(sbx.sandboxId, 10_000, { apiKey: WRONG_KEY }),
      AuthenticationError
    )
    await rejectsWith(Sandbox.connect(sbx.sandboxId, { apiKey: WRONG_KEY }), AuthenticationError)
    assert.equal(await sbx.isRunning(), true, 'a rejected kill must not kill')
  })

  test('an unknown template is an error, and no sandbox is left behind', async () => {
    const tag = uniq('tag')
    const err = await rejectsWith(
      Sandbox.create(`no-such-template-${uniq('t')}`, { metadata: { [SUITE_KEY]: 'js', tag } }),
      SandboxError
    )
    assert.ok(err.message.length > 0)
    const left = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    assert.deepEqual(left, [])
  })

  test('a missing file is FileNotFoundError for read, getInfo, rename and list', async (t) => {
    const sbx = await createSandbox(t)
    await rejectsWith(sbx.files.read('nope.txt'), FileNotFoundError)
    await rejectsWith(sbx.files.getInfo('nope.txt'), FileNotFoundError)
    await rejectsWith(sbx.files.rename('nope.txt', 'x.txt'), FileNotFoundError)
    await rejectsWith(sbx.files.list('nope-dir'), FileNotFoundError)
  })

  test('killing a sandbox mid-stream surfaces "sandbox was killed" TimeoutError', async (t) => {
    const sbx = await createSandbox(t)
    const h = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
    let watchExit
    const watchHandle = await sbx.files.watchDir('/home/user', () => {}, {
      timeoutMs: 0,
      onExit: (err) => (watchExit = err ?? null),
    })
    t.after(() => watchHandle.stop())

    assert.equal(await Sandbox.kill(sbx.sandboxId), true)

    await rejectsWith(h.wait(), TimeoutError, KILLED)
    await waitFor('watch onExit after kill', () => watchExit !== undefined)
    assert.ok(watchExit instanceof TimeoutError, `watch ended with ${watchExit}`)
    assert.match(watchExit.message, KILLED)
  })

  test('a command that is running when the sandbox times out gets the same TimeoutError', async (t) => {
    const sbx = await createSandbox(t, { timeoutMs: 300_000 })
    const h = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
    await sbx.setTimeout(2_000)
    await rejectsWith(h.wait(), TimeoutError, KILLED)
  })

  test('operations on a killed sandbox fail clearly', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('f.txt', 'x')
    assert.equal(await sbx.kill(), true)

    assert.equal(await sbx.isRunning(), false)
    // envd REST and unary RPC answer 502 → TimeoutError ("sandbox timeout").
    await rejectsWith(sbx.files.read('f.txt'), TimeoutError)
    await rejectsWith(sbx.files.exists('f.txt'), TimeoutError)
    await rejectsWith(sbx.files.write('g.txt', 'y'), TimeoutError)
    // Streams fail before their start event.
    const runErr = await rejectsWith(sbx.commands.run('echo hi'), SandboxError)
    assert.ok(
      runErr instanceof SandboxNotFoundError || runErr instanceof TimeoutError,
      `commands.run on a killed sandbox gave ${runErr.constructor.name}: ${runErr.message}`
    )
    // The control plane no longer knows it.
    await rejectsWith(sbx.getInfo(), SandboxNotFoundError)
    await rejectsWith(sbx.setTimeout(60_000), SandboxNotFoundError)
    await rejectsWith(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
    await rejectsWith(sbx.getMetrics(), SandboxNotFoundError)
  })
})
