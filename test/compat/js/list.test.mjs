// Sandbox.list (GET /v2/sandboxes, docs/wire/e2b-api.md §2.4): metadata filters with the
// double encoding, state filter, pagination with X-Next-Token.
//
// Other tests create sandboxes concurrently, so every query here filters on a
// metadata tag unique to the test.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Sandbox } from 'e2b'
import { CONCURRENCY, SUITE_KEY, assertDate, createSandbox, uniq } from './helpers.mjs'

/** Drains a paginator into one array, checking hasNext bookkeeping. */
async function listAll(opts) {
  const paginator = Sandbox.list(opts)
  const items = []
  let pages = 0
  while (paginator.hasNext) {
    items.push(...(await paginator.nextItems()))
    pages++
    assert.ok(pages < 50, 'paginator never ends')
  }
  return items
}

describe('list', { concurrency: CONCURRENCY }, () => {
  test('metadata filter (including "k y" = "v&1") returns exactly the matching sandboxes', async (t) => {
    const tag = uniq('tag')
    const a = await createSandbox(t, { metadata: { tag, which: 'a', 'k y': 'v&1' } })
    const b = await createSandbox(t, { metadata: { tag, which: 'b', 'k y': 'other' } })

    const both = await listAll({ query: { metadata: { tag } } })
    assert.deepEqual(both.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())

    const special = await listAll({ query: { metadata: { tag, 'k y': 'v&1' } } })
    assert.deepEqual(special.map((s) => s.sandboxId), [a.sandboxId])
    assert.deepEqual(special[0].metadata, { [SUITE_KEY]: 'js', tag, which: 'a', 'k y': 'v&1' })

    // Filters are an AND of equalities.
    const none = await listAll({ query: { metadata: { tag, which: 'a', 'k y': 'other' } } })
    assert.deepEqual(none, [])

    const onlyB = await listAll({ query: { metadata: { tag, which: 'b' } } })
    assert.deepEqual(onlyB.map((s) => s.sandboxId), [b.sandboxId])
  })

  test('listed sandboxes carry every field, metadata exactly as sent', async (t) => {
    const tag = uniq('tag')
    const metadata = { tag, unicode: 'héllo wörld', eq: 'a=b&c=d', [SUITE_KEY]: 'js' }
    const sbx = await createSandbox(t, { metadata, timeoutMs: 90_000 })
    const [item, ...rest] = await listAll({ query: { metadata: { tag } } })
    assert.deepEqual(rest, [])
    assert.equal(item.sandboxId, sbx.sandboxId)
    assert.deepEqual(item.metadata, metadata)
    assert.equal(item.state, 'running')
    assert.equal(typeof item.templateId, 'string')
    assert.ok(item.templateId.length > 0)
    assert.ok(item.cpuCount >= 1)
    assert.ok(item.memoryMB >= 1)
    assert.match(item.envdVersion, /^\d+\.\d+\.\d+/)
    assertDate(item.startedAt, 'startedAt')
    assertDate(item.endAt, 'endAt')
    const ttl = item.endAt.getTime() - item.startedAt.getTime()
    assert.ok(Math.abs(ttl - 90_000) <= 3_000, `endAt - startedAt = ${ttl} ms`)
  })

  test('state filter: running includes, paused excludes a running sandbox', async (t) => {
    const tag = uniq('tag')
    const sbx = await createSandbox(t, { metadata: { tag } })

    const running = await listAll({ query: { metadata: { tag }, state: ['running'] } })
    assert.deepEqual(running.map((s) => s.sandboxId), [sbx.sandboxId])

    const paused = await listAll({ query: { metadata: { tag }, state: ['paused'] } })
    assert.deepEqual(paused, [])

    const both = await listAll({ query: { metadata: { tag }, state: ['running', 'paused'] } })
    assert.deepEqual(both.map((s) => s.sandboxId), [sbx.sandboxId])
  })

  test('pagination with limit 1: two pages, newest first, no duplicates', async (t) => {
    const tag = uniq('tag')
    const older = await createSandbox(t, { metadata: { tag, n: '1' } })
    const newer = await createSandbox(t, { metadata: { tag, n: '2' } })

    const paginator = Sandbox.list({ query: { metadata: { tag } }, limit: 1 })
    assert.equal(paginator.hasNext, true)

    const page1 = await paginator.nextItems()
    assert.equal(page1.length, 1)
    assert.equal(page1[0].sandboxId, newer.sandboxId, 'the first page must hold the newest sandbox')
    assert.equal(paginator.hasNext, true, 'no X-Next-Token after the first of two pages')
    assert.ok(paginator.nextToken, 'nextToken is empty')

    const page2 = await paginator.nextItems()
    assert.equal(page2.length, 1)
    assert.equal(page2[0].sandboxId, older.sandboxId)
    assert.equal(paginator.hasNext, false, 'X-Next-Token set on the last page')

    // The cursor can be carried to a fresh paginator.
    const first = Sandbox.list({ query: { metadata: { tag } }, limit: 1 })
    await first.nextItems()
    const resumed = Sandbox.list({
      query: { metadata: { tag } },
      limit: 1,
      nextToken: first.nextToken,
    })
    const page2b = await resumed.nextItems()
    assert.deepEqual(page2b.map((s) => s.sandboxId), [older.sandboxId])

    // Ascending order flips the pages.
    const asc = await listAll({ query: { metadata: { tag } }, limit: 1, order: 'asc' })
    assert.deepEqual(asc.map((s) => s.sandboxId), [older.sandboxId, newer.sandboxId])
  })

  test('a killed sandbox disappears from the list', async (t) => {
    const tag = uniq('tag')
    const sbx = await createSandbox(t, { metadata: { tag } })
    assert.equal((await listAll({ query: { metadata: { tag } } })).length, 1)
    assert.equal(await sbx.kill(), true)
    assert.deepEqual(await listAll({ query: { metadata: { tag } } }), [])
  })
})
