'use strict'
// Tests of nodekernel/transform.js and nodekernel/session.js, run by
// node_test.go (`node --test`, with the TypeScript compiler on NODE_PATH). Each
// case runs transformed cells one after the other in one context, as the
// kernel's session does, and checks what later cells see.

const assert = require('node:assert/strict')
const { test } = require('node:test')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const vm = require('node:vm')

const kernelDir = path.join(__dirname, '..', 'nodekernel')
const { transform, compiles } = require(path.join(kernelDir, 'transform.js'))
globalThis.__cubby = require(path.join(kernelDir, 'session.js'))

/** run runs one cell the way the session does and resolves to its result. */
function run(code) {
  const script = transform(code)
  return new Promise((resolve, reject) => {
    let async = false
    globalThis.$$ = {
      sendResult(p) {
        async = true
        Promise.resolve(p).then(resolve, reject)
      },
    }
    try {
      const v = vm.runInThisContext(script)
      if (!async) resolve(v)
    } catch (err) {
      reject(err)
    }
  })
}

test('plain scripts are not transformed', () => {
  for (const code of ['1 + 1', 'var a = 1\na', 'const f = () => 2; f()', 'throw new Error("x")']) {
    assert.equal(transform(code), code)
  }
  assert.equal(compiles('let x: number = 1'), false)
})

test('typescript cells run and their declarations persist', async () => {
  assert.equal(await run('const tsBase: number = 40\nfunction tsAdd(a: number, b: number): number { return a + b }'), undefined)
  assert.equal(await run('tsAdd(tsBase, 2)'), 42)
  assert.equal(await run('interface P { n: number }\nconst tsP: P = { n: 7 }\ntsP.n * 2'), 14)
  assert.equal(await run('enum Color { Red = 1, Green }\nColor.Green'), 2)
  assert.equal(await run('type T = string\nlet s: T = "ab"\ns.length'), 2)
})

test('top-level await keeps declarations and returns the last expression', async () => {
  assert.equal(await run('const awaited = await Promise.resolve(5)\nlet [first, , third] = [1, 2, 3]\nawaited + third'), 8)
  assert.equal(await run('awaited * first'), 5)
  assert.equal(await run('async function later() { return 3 }\nclass K { v() { return 4 } }\nawait later() + new K().v()'), 7)
  assert.equal(await run('later.name + new K().v()'), 'later4')
  await assert.rejects(run('await Promise.reject(new TypeError("nope"))'), { name: 'TypeError', message: 'nope' })
})

test('static imports of built-ins, CommonJS and ES modules from the working directory', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cubby-node-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const pkg = (name, files) => {
    const d = path.join(dir, 'node_modules', name)
    fs.mkdirSync(d, { recursive: true })
    for (const [f, c] of Object.entries(files)) fs.writeFileSync(path.join(d, f), c)
  }
  pkg('cjs-pkg', { 'package.json': '{"name":"cjs-pkg","main":"i.js"}', 'i.js': 'module.exports = { hello: (n) => "hi " + n }' })
  pkg('esm-pkg', { 'package.json': '{"name":"esm-pkg","type":"module","main":"i.js"}', 'i.js': 'export default 7\nexport const named = 8' })
  pkg('esm-only', {
    'package.json': '{"name":"esm-only","type":"module","exports":{".":{"import":"./i.js"}}}',
    'i.js': 'export const only = "esm"',
  })
  const cwd = process.cwd()
  process.chdir(dir)
  t.after(() => process.chdir(cwd))
  assert.equal(await run('import fs from "fs"\nimport { join } from "node:path"\ntypeof fs.readFileSync + join("a", "b")'), 'functiona/b')
  assert.equal(await run('import cjs, { hello } from "cjs-pkg"\nhello("x") + cjs.hello("y")'), 'hi xhi y')
  assert.equal(await run('import seven, { named } from "esm-pkg"\nimport * as ns from "esm-only"\nseven + named + ns.only'), '15esm')
  assert.equal(await run('hello("again") + seven'), 'hi again7', 'imported names persist')
  await assert.rejects(run('import nothing from "no-such-package-here"'), { code: 'MODULE_NOT_FOUND' })
  assert.equal((await run('(await import("esm-pkg")).named')), 8, 'import() resolves from the working directory')
})

test('exports are dropped, syntax errors are left to Node', async () => {
  assert.equal(await run('export const exported: number = 3\nexport default exported + 1'), 4)
  assert.equal(await run('exported'), 3)
  assert.equal(transform('let x: = 1'), 'let x: = 1')
  assert.throws(() => vm.runInThisContext(transform('1 +')), SyntaxError)
})

test('SIGINT interrupts a busy cell and a pending await; state survives', async () => {
  const { spawn } = require('node:child_process')
  const interrupt = (ms) => spawn('sh', ['-c', `sleep ${ms / 1000}; kill -INT ${process.pid}`])
  await run('var survivor = 41')
  interrupt(300)
  await assert.rejects(run('while (true) {}'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' })
  interrupt(300)
  await assert.rejects(run('await new Promise((r) => setTimeout(r, 60000).unref())'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' })
  assert.equal(await run('survivor + 1'), 42)
})
