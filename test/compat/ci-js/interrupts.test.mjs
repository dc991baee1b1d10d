// Ending executions abnormally with the official @e2b/code-interpreter SDK
// (docs/wire/code-interpreter.md §4.2, §4.5): client timeout
// interrupts the kernel, kernel death, a context restarted or removed mid-run,
// input(), and a sandbox killed mid-run.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Sandbox, TimeoutError } from '@e2b/code-interpreter'
import { CONCURRENCY, createSandbox, rejectsWith, runOk } from './helpers.mjs'

const LONG = 'import time\nprint("started", flush=True)\ntime.sleep(300)'

/** Starts `code` and resolves `started` at its first stdout line; returns both. */
function startLong(sbx, code, opts = {}) {
  let onStarted
  const started = new Promise((resolve) => (onStarted = resolve))
  const run = sbx.runCode(code, { ...opts, onStdout: () => onStarted() })
  // Settle into a value so the rejection is never unhandled while we wait.
  const settled = run.then(
    (execution) => ({ execution }),
    (error) => ({ error })
  )
  return { started: Promise.race([started, settled]), settled }
}

describe('interrupts', { concurrency: CONCURRENCY }, () => {
  test('timeoutMs aborts the call, the kernel is interrupted and the next cell runs with state kept', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'kept = 7')
    await rejectsWith(
      sbx.runCode('import time\ntime.sleep(300)', { timeoutMs: 3000 }),
      TimeoutError,
      /Execution timed out/
    )
    // Were the sleeping cell not interrupted, this one would queue behind it
    // for 300 s and hit its own timeout (docs/wire/code-interpreter.md §4.5: within 5 s + 10 s).
    const next = await runOk(sbx, 'kept + 1', { timeoutMs: 15_000 })
    assert.equal(next.text, '8', 'an interrupt keeps the state')
  })

  test('kernel death ends the execution with an error and the context works again', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'doomed = 1')
    const died = await sbx.runCode('import os\nos._exit(1)', { timeoutMs: 60_000 })
    assert.ok(died.error, 'kernel death is reported as an error')
    assert.ok(died.error.name.length > 0 && died.error.value.length > 0, JSON.stringify(died.error))
    const after = await runOk(sbx, '1 + 1', { timeoutMs: 60_000 })
    assert.equal(after.text, '2')
    assert.equal((await sbx.runCode('doomed')).error?.name, 'NameError', 'a new kernel has no state')
    // A created context recovers the same way.
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.ok((await sbx.runCode('import os\nos._exit(3)', { context: ctx, timeoutMs: 60_000 })).error)
    assert.equal((await runOk(sbx, 'import os\nos.getcwd()', { context: ctx, timeoutMs: 60_000 })).text, '/tmp')
  })

  test('restarting or removing a context mid-run ends that execution with an error', async (t) => {
    const sbx = await createSandbox(t)
    const ctx = await sbx.createCodeContext()
    let run = startLong(sbx, LONG, { context: ctx })
    await run.started
    await sbx.restartCodeContext(ctx)
    let res = await run.settled
    assert.equal(res.error, undefined, `the stream ends normally: ${res.error}`)
    assert.ok(res.execution.error, 'restart mid-run is an execution error')
    assert.equal((await runOk(sbx, '3 * 3', { context: ctx })).text, '9')

    run = startLong(sbx, LONG, { context: ctx })
    await run.started
    await sbx.removeCodeContext(ctx)
    res = await run.settled
    assert.equal(res.error, undefined, `the stream ends normally: ${res.error}`)
    assert.ok(res.execution.error, 'removal mid-run is an execution error')
    assert.equal((await runOk(sbx, '2 + 2')).text, '4', 'other contexts keep working')
  })

  test('input() is an error, not a hang', async (t) => {
    const sbx = await createSandbox(t)
    const ex = await sbx.runCode('input("name? ")', { timeoutMs: 30_000 })
    assert.ok(ex.error, 'input() must fail')
    assert.equal((await runOk(sbx, '5')).text, '5')
  })

  test('killing the sandbox mid-run gives the SDK\'s "sandbox was killed" TimeoutError', async (t) => {
    const sbx = await createSandbox(t)
    const run = startLong(sbx, LONG, { timeoutMs: 120_000 })
    await run.started
    await Sandbox.kill(sbx.sandboxId)
    const res = await run.settled
    assert.ok(res.error, 'runCode must reject')
    assert.ok(res.error instanceof TimeoutError, `${res.error?.constructor?.name}: ${res.error?.message}`)
    assert.match(res.error.message, /The sandbox was killed while the request was in progress/)
  })
})
