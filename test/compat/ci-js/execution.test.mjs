// runCode basics with the official @e2b/code-interpreter SDK (docs/wire/code-interpreter.md §4.1,
// §4.2): state across calls, execution counts, streaming callbacks in
// order, main vs display results, result formats and errors.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { CONCURRENCY, HOME, assertNoError, createSandbox, runOk, uniq } from './helpers.mjs'

describe('execution', { concurrency: CONCURRENCY }, () => {
  test('state survives between calls and execution counts only user cells', async (t) => {
    const sbx = await createSandbox(t)
    const first = await runOk(sbx, 'x = 1')
    assert.deepEqual(first.results, [], 'an assignment has no result')
    assert.equal(first.text, undefined)
    assert.equal(first.executionCount, 1, 'first user cell in a fresh sandbox')

    const second = await runOk(sbx, 'x += 1; x')
    assert.equal(second.text, '2')
    assert.equal(second.results.length, 1)
    assert.equal(second.results[0].isMainResult, true)
    assert.equal(second.executionCount, 2, 'internal (env, cwd) runs must not count')

    const third = await runOk(sbx, 'x * 10')
    assert.equal(third.text, '20')
    assert.equal(third.executionCount, 3)
  })

  test('callbacks stream stdout, stderr, results and the error in order, before the cell ends', async (t) => {
    const sbx = await createSandbox(t)
    const flag = `/tmp/${uniq('go')}`
    // The cell waits (up to 60 s) for a file the test only writes once the
    // first stdout line has reached the client: a server that buffered the
    // stream until the end would make the cell print "not streamed".
    const code = `
import os, sys, time
from IPython.display import display
print("out1", flush=True)
deadline = time.time() + 60
while not os.path.exists(${JSON.stringify(flag)}) and time.time() < deadline:
    time.sleep(0.05)
print("streamed" if os.path.exists(${JSON.stringify(flag)}) else "not streamed", flush=True)
time.sleep(0.3)
print("err1", file=sys.stderr, flush=True)
time.sleep(0.3)
display("shown")
time.sleep(0.3)
print("out2", flush=True)
time.sleep(0.3)
raise ValueError("last")
`
    const events = []
    let wrote
    const execution = await sbx.runCode(code, {
      onStdout: (m) => {
        events.push(['stdout', m.line])
        assert.equal(m.error, false)
        assert.equal(typeof m.timestamp, 'number')
        if (m.line.includes('out1') && !wrote) wrote = sbx.files.write(flag, 'go')
      },
      onStderr: (m) => {
        events.push(['stderr', m.line])
        assert.equal(m.error, true)
      },
      onResult: (r) => events.push(['result', r.text, r.isMainResult]),
      onError: (e) => events.push(['error', e.name, e.value]),
    })
    await wrote
    assert.deepEqual(events, [
      ['stdout', 'out1\n'],
      ['stdout', 'streamed\n'],
      ['stderr', 'err1\n'],
      ['result', 'shown', false],
      ['stdout', 'out2\n'],
      ['error', 'ValueError', 'last'],
    ])
    assert.deepEqual(execution.logs.stdout, ['out1\n', 'streamed\n', 'out2\n'])
    assert.deepEqual(execution.logs.stderr, ['err1\n'])
    assert.equal(execution.results.length, 1)
    assert.equal(execution.error.name, 'ValueError')
  })

  test('display() results are not the main result; the last expression is', async (t) => {
    const sbx = await createSandbox(t)
    const ex = await runOk(sbx, 'from IPython.display import display\ndisplay(1)\ndisplay("two")\n3')
    assert.deepEqual(
      ex.results.map((r) => [r.text, r.isMainResult]),
      [
        ['1', false],
        ['two', false],
        ['3', true],
      ]
    )
    assert.equal(ex.text, '3')
    // A trailing semicolon suppresses the main result, displays stay.
    const quiet = await runOk(sbx, 'display(4)\n5;')
    assert.deepEqual(
      quiet.results.map((r) => [r.text, r.isMainResult]),
      [['4', false]]
    )
    assert.equal(quiet.text, undefined)
  })

  test('text/plain loses one pair of surrounding quotes', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal((await runOk(sbx, 'import os\nos.getcwd()')).text, HOME)
    assert.equal((await runOk(sbx, '"double"')).text, 'double')
    assert.equal((await runOk(sbx, "'it\\'s'")).text, "it's", 'repr gives "it\'s"')
    assert.equal((await runOk(sbx, '[1, "a"]')).text, "[1, 'a']", 'only surrounding quotes go')
    assert.equal((await runOk(sbx, '42')).text, '42')
  })

  test('rich formats: html, markdown, svg, latex, javascript, json objects and extra', async (t) => {
    const sbx = await createSandbox(t)
    const html = (await runOk(sbx, 'from IPython.display import HTML\nHTML("<b>x</b>")')).results[0]
    assert.equal(html.html, '<b>x</b>')
    assert.deepEqual(html.formats(), ['html'])

    const md = (await runOk(sbx, 'from IPython.display import Markdown\nMarkdown("# Title")')).results[0]
    assert.equal(md.markdown, '# Title')

    const svgSrc = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'
    const svg = (await runOk(sbx, `from IPython.display import SVG\nSVG(${JSON.stringify(svgSrc)})`)).results[0]
    assert.match(svg.svg, /^<svg[^>]*width="4"/)

    const latex = await runOk(sbx, "from IPython.display import display\ndisplay({'text/latex': r'$\\frac{1}{2}$'}, raw=True)")
    assert.equal(latex.results.length, 1)
    const lr = latex.results[0]
    assert.equal(lr.latex, '$\\frac{1}{2}$')
    assert.equal(lr.text, undefined, 'no text/plain was given')
    assert.deepEqual(lr.formats(), ['latex'])
    assert.deepEqual(lr.extra, {})
    assert.equal(lr.isMainResult, false)

    const js = (await runOk(sbx, 'from IPython.display import Javascript\nJavascript("var a = 1;")')).results[0]
    assert.equal(js.javascript, 'var a = 1;')

    const json = (await runOk(sbx, 'from IPython.display import JSON\nJSON({"a": 1, "b": [1, 2], "c": {"d": None}})')).results[0]
    assert.deepEqual(json.json, { a: 1, b: [1, 2], c: { d: null } }, 'application/json is an object, not a string')

    const dict = (await runOk(sbx, 'import numpy as np\n{"k": [1, 2], "n": np.int64(5)}')).results[0]
    assert.deepEqual(dict.json, { k: [1, 2], n: 5 }, 'dicts get numpy-safe JSON')
    assert.equal(dict.text, "{'k': [1, 2], 'n': 5}")

    // A custom MIME type goes under "extra", never as a top-level key, so the
    // JS Result.extra (built from unknown top-level keys) stays empty.
    const custom = (
      await runOk(sbx, "display({'application/x-cubby': 'v', 'text/plain': 'p'}, raw=True)")
    ).results[0]
    assert.equal(custom.text, 'p')
    assert.deepEqual(custom.extra, {})
    assert.deepEqual(custom.raw.extra, { 'application/x-cubby': 'v' })
  })

  test('errors carry name, value and an uncoloured traceback; the context keeps working', async (t) => {
    const sbx = await createSandbox(t)
    await runOk(sbx, 'kept = 41')
    const errs = []
    const ex = await sbx.runCode('undefined_name_q', { onError: (e) => errs.push(e) })
    assert.equal(ex.error.name, 'NameError')
    assert.equal(ex.error.value, "name 'undefined_name_q' is not defined")
    assert.equal(typeof ex.error.traceback, 'string')
    assert.match(ex.error.traceback, /NameError/)
    assert.match(ex.error.traceback, /undefined_name_q/)
    assert.doesNotMatch(ex.error.traceback, /\x1b\[/, 'colours are disabled')
    assert.deepEqual(ex.results, [])
    assert.equal(errs.length, 1)
    assert.equal(errs[0].name, 'NameError')

    const syntax = await sbx.runCode('def f(:\n  pass')
    assert.equal(syntax.error.name, 'SyntaxError')
    assert.ok(syntax.error.value.length > 0)

    const partial = await sbx.runCode('print("before")\nraise KeyError("k")\nprint("after")')
    assert.deepEqual(partial.logs.stdout, ['before\n'])
    assert.equal(partial.error.name, 'KeyError')
    assert.equal(partial.error.value, "'k'")

    const exit = await sbx.runCode('import sys\nsys.exit(3)')
    assert.equal(exit.error?.name, 'SystemExit', 'sys.exit() is an error, the kernel lives on')

    const after = await runOk(sbx, 'kept + 1')
    assert.equal(after.text, '42', 'errors do not lose state')
    assertNoError(after)
  })

  test('a large stdout arrives complete', async (t) => {
    const sbx = await createSandbox(t)
    const ex = await runOk(sbx, 'for i in range(20000):\n    print(f"line {i:05d}")')
    const all = ex.logs.stdout.join('')
    const lines = all.split('\n').filter(Boolean)
    assert.equal(lines.length, 20000)
    assert.equal(lines[0], 'line 00000')
    assert.equal(lines[19999], 'line 19999')
  })
})
