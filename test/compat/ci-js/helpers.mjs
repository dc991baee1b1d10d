// Shared helpers for the code-interpreter JS compatibility suite.
//
// The suite drives the official, unmodified `@e2b/code-interpreter` npm
// package (pinned in package.json) against a Cubby server. The SDK is
// configured only through the environment, as a user would configure it
// (docs/wire/e2b-api.md §1.1): E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (all required).
// test/compat/run.sh starts a server and exports them.
//
// Every sandbox comes from the SDK's default template (`code-interpreter-v1`,
// an alias of Cubby's built-in `code-interpreter`), unless
// CUBBY_COMPAT_CI_TEMPLATE names another one.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { Sandbox } from '@e2b/code-interpreter'

const REQUIRED_ENV = ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']

for (const name of REQUIRED_ENV) {
  if (!process.env[name]) {
    throw new Error(
      `${name} is not set: run the suite through test/compat/run.sh --ci-only or export ` +
        'E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY for a running Cubby server'
    )
  }
}
if (process.env.E2B_DEBUG && process.env.E2B_DEBUG.toLowerCase() === 'true') {
  throw new Error('E2B_DEBUG=true bypasses the control plane; unset it')
}

/** Template override; undefined means the SDK default (code-interpreter-v1). */
export const TEMPLATE = process.env.CUBBY_COMPAT_CI_TEMPLATE || undefined

/** Tests run concurrently inside one file up to this many at a time. */
export const CONCURRENCY = Number(process.env.CUBBY_COMPAT_CONCURRENCY || 4)

/** Metadata key every sandbox of this suite carries, for leak hunting. */
export const SUITE_KEY = 'cubby-compat'

/** Value of SUITE_KEY for this suite's sandboxes. */
export const SUITE_VALUE = 'ci-js'

/** The sandbox user's home, the default cwd of every context (docs/wire/code-interpreter.md §4.1). */
export const HOME = '/home/user'

/** Returns a short random token usable in metadata, paths and names. */
export function uniq(prefix = 'c') {
  return `${prefix}${randomUUID().replace(/-/g, '').slice(0, 12)}`
}

/**
 * Creates a code-interpreter sandbox (SDK default template) and registers its
 * kill in the test's after-hook, so it is cleaned up whether the test passes
 * or fails. `opts` go to Sandbox.create unchanged (metadata gets SUITE_KEY).
 */
export async function createSandbox(t, opts = {}) {
  const metadata = { [SUITE_KEY]: SUITE_VALUE, ...(opts.metadata || {}) }
  const full = { timeoutMs: 300_000, ...opts, metadata }
  const sbx = TEMPLATE ? await Sandbox.create(TEMPLATE, full) : await Sandbox.create(full)
  t.after(async () => {
    await sbx.kill().catch(() => {})
  })
  return sbx
}

/**
 * Awaits `promise`, asserts it rejects with an instance of `cls` (and a
 * message matching `messagePattern`, if given) and returns the error.
 */
export async function rejectsWith(promise, cls, messagePattern) {
  let err
  try {
    await promise
  } catch (e) {
    err = e
  }
  assert.ok(err, `expected a ${cls.name}, but the call succeeded`)
  assert.ok(
    err instanceof cls,
    `expected a ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`
  )
  if (messagePattern) {
    assert.match(err.message, messagePattern)
  }
  return err
}

/** Asserts an execution finished without an error, showing it if not. */
export function assertNoError(execution, what = 'execution') {
  const e = execution.error
  assert.equal(e, undefined, `${what} failed: ${e?.name}: ${e?.value}\n${e?.traceback}`)
}

/** Runs `code` and asserts it succeeded; returns the Execution. */
export async function runOk(sbx, code, opts) {
  const execution = await sbx.runCode(code, opts)
  assertNoError(execution, JSON.stringify(code.slice(0, 60)))
  return execution
}

/** Asserts that `obj` has every key of `keys` (a value of null counts). */
export function assertKeys(obj, keys, what) {
  const missing = keys.filter((k) => !(k in obj))
  assert.deepEqual(missing, [], `${what} lacks keys ${missing.join(', ')}: ${JSON.stringify(obj)}`)
}

/** Keys every chart of a type must carry, null allowed (docs/wire/code-interpreter.md §4.4). */
export const CHART_KEYS = {
  common: ['type', 'title', 'elements'],
  twoD: ['x_label', 'y_label', 'x_unit', 'y_unit'],
  point: ['x_ticks', 'y_ticks', 'x_tick_labels', 'y_tick_labels', 'x_scale', 'y_scale'],
}

/** Returns the keys a chart of `type` must have. */
export function chartKeys(type) {
  const keys = [...CHART_KEYS.common]
  if (['line', 'scatter', 'bar', 'box_and_whisker'].includes(type)) keys.push(...CHART_KEYS.twoD)
  if (['line', 'scatter'].includes(type)) keys.push(...CHART_KEYS.point)
  return keys
}

/**
 * Compares `actual` with `expected` field by field: every key of an expected
 * object must be present in actual and match recursively, arrays must have
 * the same length, numbers may differ by 1e-6 (relative). Keys of actual that
 * expected does not mention are not checked. Fails naming the field path.
 */
export function assertFields(actual, expected, path = 'chart') {
  if (typeof expected === 'number') {
    assert.equal(typeof actual, 'number', `${path}: ${JSON.stringify(actual)} is not a number`)
    const eps = 1e-6 * Math.max(1, Math.abs(expected))
    assert.ok(Math.abs(actual - expected) <= eps, `${path}: got ${actual}, want ${expected}`)
    return
  }
  if (Array.isArray(expected)) {
    assert.ok(Array.isArray(actual), `${path}: ${JSON.stringify(actual)} is not an array`)
    assert.equal(actual.length, expected.length, `${path}: length of ${JSON.stringify(actual)}`)
    expected.forEach((e, i) => assertFields(actual[i], e, `${path}[${i}]`))
    return
  }
  if (expected !== null && typeof expected === 'object') {
    assert.ok(actual !== null && typeof actual === 'object', `${path}: ${JSON.stringify(actual)} is not an object`)
    for (const [k, e] of Object.entries(expected)) {
      assert.ok(k in actual, `${path}.${k} is missing in ${JSON.stringify(actual)}`)
      assertFields(actual[k], e, `${path}.${k}`)
    }
    return
  }
  assert.equal(actual, expected, `${path}`)
}

/** Runs matplotlib `code` (which ends in plt.show()) and returns the single figure result. */
export async function figureResult(sbx, code) {
  const ex = await runOk(sbx, code)
  const figs = ex.results.filter((r) => r.png)
  assert.equal(figs.length, 1, `one figure expected, got ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
  assert.ok(figs[0].chart, `the figure has no chart: ${JSON.stringify(Object.keys(figs[0].raw))}`)
  return figs[0]
}
