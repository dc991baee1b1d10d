// Shared helpers for the JS compatibility suite.
//
// The suite drives the official, unmodified `e2b` npm package (pinned in
// package.json) against a Cubby server. The SDK is configured only through the
// environment, exactly as a user would configure it (docs/wire/e2b-api.md §1.1):
//   E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY  (all required)
// test/compat/run.sh starts a server and exports them.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { Sandbox } from 'e2b'

const REQUIRED_ENV = ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']

for (const name of REQUIRED_ENV) {
  if (!process.env[name]) {
    throw new Error(
      `${name} is not set: run the suite through test/compat/run.sh or export ` +
        'E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY for a running Cubby server'
    )
  }
}
if (process.env.E2B_DEBUG && process.env.E2B_DEBUG.toLowerCase() === 'true') {
  throw new Error('E2B_DEBUG=true bypasses the control plane; unset it')
}

/** Template every test sandbox is created from (docs/wire/envd.md §3.6). */
export const TEMPLATE = process.env.CUBBY_COMPAT_TEMPLATE || 'base'

/** Base URL of the sandbox side (one origin, routed by headers). */
export const SANDBOX_URL = process.env.E2B_SANDBOX_URL.replace(/\/+$/, '')

/** Tests run concurrently inside one file up to this many at a time. */
export const CONCURRENCY = Number(process.env.CUBBY_COMPAT_CONCURRENCY || 4)

/** Metadata key every sandbox of this suite carries, for leak hunting. */
export const SUITE_KEY = 'cubby-compat'

/** Returns a short random token usable in metadata, paths and file names. */
export function uniq(prefix = 'c') {
  return `${prefix}${randomUUID().replace(/-/g, '').slice(0, 12)}`
}

/**
 * Creates a sandbox from TEMPLATE and registers its kill in the test's
 * after-hook, so it is cleaned up whether the test passes or fails.
 * `opts` are passed to Sandbox.create unchanged (metadata gets SUITE_KEY).
 */
export async function createSandbox(t, opts = {}) {
  const metadata = { [SUITE_KEY]: 'js', ...(opts.metadata || {}) }
  const sbx = await Sandbox.create(TEMPLATE, {
    timeoutMs: 300_000,
    ...opts,
    metadata,
  })
  t.after(async () => {
    await sbx.kill().catch(() => {})
  })
  return sbx
}

/**
 * Polls `fn` every `intervalMs` until it returns a truthy value and returns
 * that value; fails with `what` if `timeoutMs` passes first. Used to wait for
 * asynchronous effects (events, metrics samples), never as an assertion on
 * elapsed time.
 */
export async function waitFor(what, fn, { timeoutMs = 10_000, intervalMs = 100 } = {}) {
  const deadline = Date.now() + timeoutMs
  let lastErr
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
    } catch (err) {
      lastErr = err
    }
    if (Date.now() > deadline) {
      const suffix = lastErr ? ` (last error: ${lastErr})` : ''
      assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}${suffix}`)
    }
    await sleep(intervalMs)
  }
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/**
 * Awaits `promise`, asserts it rejects with an instance of `cls` and returns
 * the error for further checks.
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

/** Asserts `d` is a valid Date. */
export function assertDate(d, what) {
  assert.ok(d instanceof Date, `${what} should be a Date, got ${typeof d}`)
  assert.ok(!Number.isNaN(d.getTime()), `${what} should be a valid Date`)
}

/** Asserts |actual - expected| <= slackMs for two Dates/ms values. */
export function assertNear(actual, expected, slackMs, what) {
  const a = actual instanceof Date ? actual.getTime() : actual
  const e = expected instanceof Date ? expected.getTime() : expected
  assert.ok(
    Math.abs(a - e) <= slackMs,
    `${what}: ${new Date(a).toISOString()} is not within ${slackMs} ms of ${new Date(e).toISOString()}`
  )
}

/** Reads a web ReadableStream to one Uint8Array. */
export async function readAll(stream) {
  const chunks = []
  let len = 0
  for await (const chunk of stream) {
    chunks.push(chunk)
    len += chunk.length
  }
  const out = new Uint8Array(len)
  let off = 0
  for (const c of chunks) {
    out.set(c, off)
    off += c.length
  }
  return out
}

/** Returns `n` deterministic pseudo-random bytes (all byte values appear). */
export function patternBytes(n, seed = 7) {
  const out = new Uint8Array(n)
  let x = seed
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0
    out[i] = (x >>> 16) & 0xff
  }
  return out
}
