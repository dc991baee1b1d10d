// The code interpreter as E2B's template runs it (official @e2b/code-interpreter):
// the default python and javascript contexts exist the moment a sandbox is
// created and are listed first; kernels run as root; javascript/typescript run
// on Node.js (require, ESM import, node_modules, npm install) and Deno is
// "deno"; java is a Java kernel with state, env vars, cwd and errors.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { describe, test } from 'node:test'
import { Sandbox, TimeoutError } from '@e2b/code-interpreter'
import { CONCURRENCY, HOME, createSandbox, rejectsWith, runOk } from './helpers.mjs'

describe('E2B kernels', { concurrency: CONCURRENCY }, () => {
  test('the default contexts exist right after create and are listed first', async (t) => {
    const sbx = await createSandbox(t)
    const mine = await sbx.createCodeContext({ cwd: '/tmp' })
    const listed = await sbx.listCodeContexts()
    const langs = listed.map((c) => c.language)
    assert.deepEqual(langs.slice(0, 2), ['python', 'javascript'], `defaults first: ${JSON.stringify(listed)}`)
    assert.deepEqual(listed.slice(0, 2).map((c) => c.cwd), [HOME, HOME])
    assert.equal(listed.at(-1).id, mine.id, 'the context created meanwhile comes after the defaults')
    assert.equal(listed.length, 3)
    const other = await Sandbox.connect(sbx.sandboxId)
    assert.deepEqual((await other.listCodeContexts()).map((c) => c.language), ['python', 'javascript', 'python'])
  })

  test('kernels run as root; a context may work in /root', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal((await runOk(sbx, 'import os\n(os.getuid(), os.getgid())')).text, '(0, 0)')
    const ctx = await sbx.createCodeContext({ cwd: '/root' })
    assert.equal(ctx.cwd, '/root')
    assert.equal((await runOk(sbx, 'import os\nos.getcwd()', { context: ctx })).text, '/root')
    assert.equal((await runOk(sbx, 'process.getuid()', { language: 'javascript' })).text, '0')
  })

  test('javascript is Node.js: require, ESM import, top-level await', async (t) => {
    const sbx = await createSandbox(t)
    const ex = await runOk(sbx, "const os = require('os'); [typeof os.cpus, process.release.name]", { language: 'js' })
    assert.equal(ex.text, "[ 'function', 'node' ]")
    assert.equal((await runOk(sbx, "require('fs').existsSync('/etc/hostname')", { language: 'javascript' })).text, 'true')
    assert.equal((await runOk(sbx, 'typeof Deno', { language: 'javascript' })).text, 'undefined')
    await runOk(sbx, "import path from 'node:path'\nconst waited = await Promise.resolve(41)", { language: 'js' })
    assert.equal((await runOk(sbx, "path.join('a', 'b') + (waited + 1)", { language: 'js' })).text, 'a/b42')
    const err = await sbx.runCode("require('no-such-module-here')", { language: 'javascript' })
    assert.ok(err.error && err.error.value.includes('no-such-module-here'), JSON.stringify(err.error))
    // The last expression is displayed (util.inspect), console.log is stdout,
    // and a throw is the error's name, message and stack.
    const shown = await runOk(sbx, "console.log('side', 1);\n({ a: 1, b: [2] })", { language: 'js' })
    assert.equal(shown.text, '{ a: 1, b: [ 2 ] }')
    assert.deepEqual(shown.logs.stdout, ['side 1\n'])
    const thrown = await sbx.runCode("throw new TypeError('bad js')", { language: 'js' })
    assert.equal(thrown.error?.name, 'TypeError', JSON.stringify(thrown.error))
    assert.equal(thrown.error.value, 'bad js')
    assert.match(thrown.error.traceback, /TypeError: bad js/)
    assert.equal((await runOk(sbx, 'waited', { language: 'js' })).text, '41', 'state survives an error')
  })

  test('javascript: a timeout interrupts a busy loop or an await with state kept; kernel death recovers', async (t) => {
    const sbx = await createSandbox(t)
    const js = { language: 'js' }
    await runOk(sbx, 'var kept = await Promise.resolve(7)', js) // loads the cell transform's compiler untimed
    await rejectsWith(sbx.runCode('while (true) {}', { ...js, timeoutMs: 3000 }), TimeoutError, /timed out/)
    assert.equal((await runOk(sbx, 'kept + 1', { ...js, timeoutMs: 15_000 })).text, '8', 'an interrupt keeps the state')
    await rejectsWith(sbx.runCode('await new Promise(() => {})', { ...js, timeoutMs: 3000 }), TimeoutError, /timed out/)
    assert.equal((await runOk(sbx, 'kept + 2', { ...js, timeoutMs: 15_000 })).text, '9')
    const died = await sbx.runCode('process.exit(1)', { ...js, timeoutMs: 60_000 })
    assert.ok(died.error?.name && died.error.value, `kernel death is an error: ${JSON.stringify(died.error)}`)
    assert.equal((await runOk(sbx, 'typeof kept', { ...js, timeoutMs: 60_000 })).text, 'undefined', 'a new kernel has no state')
  })

  test('packages in node_modules and npm install in the sandbox', async (t) => {
    const sbx = await createSandbox(t)
    const name = `cubby-local-${randomUUID().slice(0, 8)}`
    await sbx.files.write(`${HOME}/pkgsrc/package.json`, JSON.stringify({ name, version: '1.0.0', main: 'index.js' }))
    await sbx.files.write(`${HOME}/pkgsrc/index.js`, 'module.exports = (n) => `hello ${n}`\n')
    const out = await sbx.commands.run(`cd ${HOME} && npm install --no-audit --no-fund ./pkgsrc`, { timeoutMs: 180_000 })
    assert.equal(out.exitCode, 0, out.stderr)
    assert.equal((await runOk(sbx, `require('${name}')('node')`, { language: 'javascript' })).text, 'hello node')
    assert.equal((await runOk(sbx, `import greet from '${name}'\ngreet('esm')`, { language: 'js' })).text, 'hello esm')
  })

  test('typescript runs with Node semantics; deno is its own language', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'interface P { n: number }\nconst base: P = { n: 40 }', { language: 'typescript' })
    const ex = await runOk(sbx, 'const add = (a: number, b: number): number => a + b\nadd(base.n, 2)', { language: 'ts' })
    assert.equal(ex.text, '42')
    assert.equal((await runOk(sbx, "import { hostname } from 'os'\ntypeof hostname()", { language: 'ts' })).text, 'string')
    assert.equal((await runOk(sbx, 'typeof Deno.version.deno', { language: 'deno' })).text, 'string')
  })

  test('java: state, stdout, cwd, env vars and errors', async (t) => {
    const sbx = await createSandbox(t, { envs: { SANDBOX_LEVEL: 'from-create' } })
    await runOk(sbx, 'int answer = 40;', { language: 'java' })
    assert.equal((await runOk(sbx, 'answer + 2', { language: 'java' })).text, '42')
    assert.deepEqual((await runOk(sbx, 'System.out.println("hi " + answer);', { language: 'java' })).logs.stdout, ['hi 40\n'])
    assert.equal((await runOk(sbx, 'System.getProperty("user.dir")', { language: 'java' })).text, HOME)
    const env = await runOk(sbx, 'System.getProperty("PER_CALL")', { language: 'java', envs: { PER_CALL: 'yes' } })
    assert.equal(env.text, 'yes')
    assert.equal((await runOk(sbx, 'String.valueOf(System.getProperty("PER_CALL"))', { language: 'java' })).text, 'null')
    assert.equal((await runOk(sbx, 'System.getenv("SANDBOX_LEVEL")', { language: 'java' })).text, 'from-create')
    const err = await sbx.runCode('throw new IllegalStateException("bad java");', { language: 'java' })
    assert.ok(err.error && `${err.error.name} ${err.error.value} ${err.error.traceback}`.includes('bad java'))
    assert.equal((await runOk(sbx, 'answer', { language: 'java' })).text, '40', 'state survives an error')
  })
})
