// Code contexts with the official @e2b/code-interpreter SDK (docs/wire/code-interpreter.md §4.1):
// create with cwd and language, list (defaults once each), restart, remove,
// and NotFound for unknown contexts.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { InvalidArgumentError, NotFoundError } from '@e2b/code-interpreter'
import { CONCURRENCY, HOME, createSandbox, rejectsWith, runOk } from './helpers.mjs'

function ids(list) {
  return list.map((c) => c.id)
}

describe('contexts', { concurrency: CONCURRENCY }, () => {
  test('a created context has its own cwd, language and state', async (t) => {
    const sbx = await createSandbox(t)
    const ctx = await sbx.createCodeContext({ cwd: '/tmp', language: 'python' })
    assert.equal(typeof ctx.id, 'string')
    assert.ok(ctx.id.length > 0)
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/tmp')
    assert.equal((await runOk(sbx, 'import os\nos.getcwd()', { context: ctx })).text, '/tmp')

    await runOk(sbx, 'only_here = 5', { context: ctx })
    assert.equal((await runOk(sbx, 'only_here', { context: ctx })).text, '5')
    const other = await sbx.runCode('only_here')
    assert.equal(other.error?.name, 'NameError', 'the default context does not see it')
    assert.equal((await runOk(sbx, 'os.getcwd()', { context: ctx })).text, '/tmp')
    assert.equal((await runOk(sbx, 'import os\nos.getcwd()')).text, HOME, 'default cwd')

    const plain = await sbx.createCodeContext()
    assert.equal(plain.language, 'python', 'default language')
    assert.equal(plain.cwd, HOME, 'default cwd')

    const js = await sbx.createCodeContext({ cwd: '/tmp', language: 'javascript' })
    assert.equal(js.language, 'javascript')
    assert.equal((await runOk(sbx, 'process.cwd()', { context: js })).text, '/tmp')

    const sh = await sbx.createCodeContext({ cwd: '/tmp', language: 'bash' })
    assert.equal(sh.language, 'bash')
    assert.deepEqual((await runOk(sbx, 'pwd', { context: sh })).logs.stdout, ['/tmp\n'])

    await rejectsWith(
      sbx.runCode('1', { context: ctx, language: 'python' }),
      InvalidArgumentError,
      /context or language/
    )
  })

  test('list shows the python and javascript defaults once each, plus created contexts', async (t) => {
    const sbx = await createSandbox(t)
    // Use the defaults so that lazily created or aliased contexts would show.
    await runOk(sbx, '1')
    await runOk(sbx, '1', { language: 'python' })
    await runOk(sbx, '1', { language: 'javascript' })
    const before = await sbx.listCodeContexts()
    for (const c of before) {
      assert.equal(typeof c.id, 'string')
      assert.equal(typeof c.language, 'string')
      assert.equal(typeof c.cwd, 'string')
    }
    assert.equal(new Set(ids(before)).size, before.length, `duplicate ids in ${JSON.stringify(before)}`)
    const langs = before.map((c) => c.language)
    assert.equal(langs.filter((l) => l === 'python').length, 1, `one python default: ${JSON.stringify(before)}`)
    assert.equal(langs.filter((l) => l === 'javascript').length, 1, `one javascript default: ${JSON.stringify(before)}`)
    for (const c of before) assert.equal(c.cwd, HOME)

    const a = await sbx.createCodeContext({ cwd: '/tmp' })
    const b = await sbx.createCodeContext({ language: 'javascript' })
    const after = await sbx.listCodeContexts()
    assert.equal(after.length, before.length + 2)
    assert.deepEqual(new Set(ids(after)), new Set([...ids(before), a.id, b.id]))
    assert.deepEqual(after.find((c) => c.id === a.id), { id: a.id, language: 'python', cwd: '/tmp' })
    assert.deepEqual(after.find((c) => c.id === b.id), { id: b.id, language: 'javascript', cwd: HOME })
  })

  test('restart loses the state and the context keeps working', async (t) => {
    const sbx = await createSandbox(t)
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    await runOk(sbx, 'x = 1', { context: ctx })
    await sbx.restartCodeContext(ctx)
    const lost = await sbx.runCode('x', { context: ctx })
    assert.equal(lost.error?.name, 'NameError', 'state is gone after a restart')
    assert.equal((await runOk(sbx, 'import os\nos.getcwd()', { context: ctx })).text, '/tmp', 'cwd survives')
    await runOk(sbx, 'y = 2', { context: ctx })
    assert.equal((await runOk(sbx, 'y + 1', { context: ctx })).text, '3')

    // Restart by id, of a default context (found through the list).
    await runOk(sbx, 'z = 1')
    const def = (await sbx.listCodeContexts()).find((c) => c.language === 'python' && c.id !== ctx.id)
    await sbx.restartCodeContext(def.id)
    assert.equal((await sbx.runCode('z')).error?.name, 'NameError')
    assert.ok(ids(await sbx.listCodeContexts()).includes(ctx.id), 'a restarted context stays listed')
  })

  test('remove deletes the context; unknown contexts are NotFound', async (t) => {
    const sbx = await createSandbox(t)
    const ctx = await sbx.createCodeContext()
    await runOk(sbx, '1', { context: ctx })
    await sbx.removeCodeContext(ctx)
    assert.ok(!ids(await sbx.listCodeContexts()).includes(ctx.id), 'removed context is not listed')
    await rejectsWith(sbx.runCode('1', { context: ctx }), NotFoundError)

    const ghost = { id: 'no-such-context', language: 'python', cwd: HOME }
    await rejectsWith(sbx.runCode('1', { context: ghost }), NotFoundError, /no-such-context/)
    await rejectsWith(sbx.restartCodeContext(ghost), NotFoundError)
    await rejectsWith(sbx.removeCodeContext('no-such-context'), NotFoundError)
    await rejectsWith(sbx.removeCodeContext(ctx.id), NotFoundError) // removing twice

    // The default context is unaffected.
    assert.equal((await runOk(sbx, '2 * 21')).text, '42')
  })
})
