// Every language of the code-interpreter template with the official
// @e2b/code-interpreter SDK (docs/wire/code-interpreter.md §4.1): python, javascript, typescript,
// r and bash, each keeping state between calls in its default context.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { SandboxError } from '@e2b/code-interpreter'
import { CONCURRENCY, HOME, createSandbox, rejectsWith, runOk } from './helpers.mjs'

describe('languages', { concurrency: CONCURRENCY }, () => {
  test('python', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'counter = 1', { language: 'python' })
    const ex = await runOk(sbx, 'counter += 1\nprint("py", counter)\ncounter', { language: 'Python ' })
    assert.equal(ex.text, '2')
    assert.deepEqual(ex.logs.stdout, ['py 2\n'])
  })

  test('javascript', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'var counter = 1', { language: 'javascript' })
    const ex = await runOk(sbx, 'counter += 1\nconsole.log("js", counter)\ncounter', { language: 'js' })
    assert.equal(ex.text, '2')
    assert.deepEqual(ex.logs.stdout, ['js 2\n'])
    assert.equal((await runOk(sbx, 'process.cwd()', { language: 'javascript' })).text, HOME)
    const obj = await runOk(sbx, '({ a: [1, 2], b: "s" })', { language: 'javascript' })
    assert.ok(obj.results.length === 1 && obj.results[0].isMainResult)
    const err = await sbx.runCode('throw new Error("boom")', { language: 'javascript' })
    assert.ok(err.error, 'a thrown error is an execution error')
    assert.match(`${err.error.name}: ${err.error.value}`, /boom/)
    assert.equal((await runOk(sbx, 'counter', { language: 'javascript' })).text, '2', 'state survives an error')
  })

  test('typescript', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'const base: number = 40\nfunction add(a: number, b: number): number { return a + b }', {
      language: 'typescript',
    })
    const ex = await runOk(sbx, 'add(base, 2)', { language: 'ts' })
    assert.equal(ex.text, '42')
    const iface = await runOk(sbx, 'interface P { n: number }\nconst p: P = { n: 7 }\np.n * 2', { language: 'typescript' })
    assert.equal(iface.text, '14')
  })

  test('r', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'counter <- 1', { language: 'r' })
    const ex = await runOk(sbx, 'counter <- counter + 1\ncounter', { language: 'R' })
    // IRkernel shows values with display_data, so there is no main result.
    assert.deepEqual(ex.results.map((r) => r.text), ['[1] 2'])
    const out = await runOk(sbx, 'cat("r says", counter, "\\n")', { language: 'r' })
    assert.deepEqual(out.logs.stdout, ['r says 2 \n'])
    const err = await sbx.runCode('stop("bad thing")', { language: 'r' })
    assert.ok(err.error, 'stop() is an execution error')
    assert.match(`${err.error.name} ${err.error.value}`, /bad thing/)
  })

  test('bash', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'export COUNTER=1\ncd /tmp', { language: 'bash' })
    const ex = await runOk(sbx, 'COUNTER=$((COUNTER + 1))\necho "bash $COUNTER"\npwd', { language: 'bash' })
    assert.deepEqual(ex.logs.stdout.join(''), 'bash 2\n/tmp\n')
    const err = await runOk(sbx, 'echo oops >&2', { language: 'bash' })
    assert.deepEqual(err.logs.stderr.join(''), 'oops\n')
    const failed = await sbx.runCode('false', { language: 'bash' })
    assert.ok(failed.error, 'a non-zero exit status is an execution error')
    assert.match(failed.error.value, /1/)
    assert.deepEqual((await runOk(sbx, 'echo $COUNTER', { language: 'bash' })).logs.stdout.join(''), '2\n')
  })

  test('an unknown language is a clear error, and the sandbox keeps working', async (t) => {
    const sbx = await createSandbox(t)
    // E2B answers a non-200 (500) that the SDK turns into SandboxError("<status> <text>").
    await rejectsWith(sbx.runCode('1', { language: 'cobol-nope' }), SandboxError, /^[45]\d\d /)
    assert.equal((await runOk(sbx, '1 + 1')).text, '2')
  })
})
