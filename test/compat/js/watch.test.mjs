// sandbox.files.watchDir: the server-streaming filesystem.Filesystem/WatchDir
// RPC (docs/wire/envd.md §3.3 "WatchDir").

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { FileNotFoundError, TimeoutError } from 'e2b'
import { CONCURRENCY, createSandbox, rejectsWith, waitFor } from './helpers.mjs'

const HOME = '/home/user'

/** Starts a watch that records events; the handle is stopped after the test. */
async function watch(t, sbx, path, opts = {}) {
  const events = []
  const exits = []
  const handle = await sbx.files.watchDir(path, (e) => events.push(e), {
    ...opts,
    onExit: (err) => exits.push(err ?? null),
  })
  t.after(() => handle.stop())
  return { handle, events, exits }
}

function has(events, name, type) {
  return events.some((e) => e.name === name && e.type === type)
}

function show(events) {
  return JSON.stringify(events.map((e) => [e.type, e.name]))
}

describe('watchDir', { concurrency: CONCURRENCY }, () => {
  test('a write over an existing file yields a WRITE event named after the file', async (t) => {
    const sbx = await createSandbox(t)
    const dir = `${HOME}/watched`
    await sbx.files.write(`${dir}/existing.txt`, 'v1')

    const { events } = await watch(t, sbx, dir)
    await sbx.files.write(`${dir}/existing.txt`, 'v2')
    await waitFor(`WRITE existing.txt in ${show(events)}`, () =>
      has(events, 'existing.txt', 'write')
    )

    // A new file gives CREATE; removing it gives REMOVE.
    await sbx.files.write(`${dir}/fresh.txt`, 'new')
    await waitFor(`CREATE fresh.txt in ${show(events)}`, () => has(events, 'fresh.txt', 'create'))
    await sbx.files.remove(`${dir}/fresh.txt`)
    await waitFor(`REMOVE fresh.txt in ${show(events)}`, () => has(events, 'fresh.txt', 'remove'))
  })

  test('events from commands, and a rename, are seen too', async (t) => {
    const sbx = await createSandbox(t)
    const dir = `${HOME}/cmdwatch`
    await sbx.files.makeDir(dir)
    const { events } = await watch(t, sbx, dir)

    await sbx.commands.run(`echo hi > ${dir}/from-shell.txt && mv ${dir}/from-shell.txt ${dir}/renamed.txt`)
    await waitFor(`CREATE from-shell.txt in ${show(events)}`, () =>
      has(events, 'from-shell.txt', 'create')
    )
    await waitFor(`RENAME from-shell.txt in ${show(events)}`, () =>
      has(events, 'from-shell.txt', 'rename')
    )
    await waitFor(`CREATE renamed.txt in ${show(events)}`, () => has(events, 'renamed.txt', 'create'))

    await sbx.commands.run(`chmod 600 ${dir}/renamed.txt`)
    await waitFor(`CHMOD renamed.txt in ${show(events)}`, () => has(events, 'renamed.txt', 'chmod'))
  })

  test('recursive watch picks up directories created later', async (t) => {
    const sbx = await createSandbox(t)
    const dir = `${HOME}/rec`
    await sbx.files.makeDir(dir)
    const { events } = await watch(t, sbx, dir, { recursive: true })

    assert.equal(await sbx.files.makeDir(`${dir}/sub`), true)
    await waitFor(`CREATE sub in ${show(events)}`, () => has(events, 'sub', 'create'))

    await sbx.files.write(`${dir}/sub/file.txt`, 'nested')
    await waitFor(`CREATE sub/file.txt in ${show(events)}`, () =>
      has(events, 'sub/file.txt', 'create')
    )
    await sbx.files.write(`${dir}/sub/file.txt`, 'nested again')
    await waitFor(`WRITE sub/file.txt in ${show(events)}`, () =>
      has(events, 'sub/file.txt', 'write')
    )
  })

  test('a non-recursive watch ignores nested changes', async (t) => {
    const sbx = await createSandbox(t)
    const dir = `${HOME}/flat`
    await sbx.files.makeDir(`${dir}/sub`)
    const { events } = await watch(t, sbx, dir)

    await sbx.files.write(`${dir}/sub/hidden.txt`, 'x')
    // A later top-level event proves the stream is live and ordered after it.
    await sbx.files.write(`${dir}/marker.txt`, 'x')
    await waitFor(`CREATE marker.txt in ${show(events)}`, () => has(events, 'marker.txt', 'create'))
    assert.ok(
      !events.some((e) => e.name.includes('hidden.txt')),
      `nested event leaked: ${show(events)}`
    )
  })

  test('includeEntry attaches EntryInfo to create/write events', async (t) => {
    const sbx = await createSandbox(t)
    const dir = `${HOME}/entries`
    await sbx.files.makeDir(dir)
    const { events } = await watch(t, sbx, dir, { includeEntry: true })

    await sbx.files.write(`${dir}/e.txt`, 'abc')
    const ev = await waitFor(`event with entry for e.txt in ${show(events)}`, () =>
      events.find((e) => e.name === 'e.txt' && (e.type === 'create' || e.type === 'write') && e.entry)
    )
    assert.equal(ev.entry.name, 'e.txt')
    assert.equal(ev.entry.path, `${dir}/e.txt`)
    assert.equal(ev.entry.type, 'file')
  })

  test('timeoutMs ends the watch with a TimeoutError passed to onExit', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.makeDir(`${HOME}/short`)
    const { exits } = await watch(t, sbx, `${HOME}/short`, { timeoutMs: 1_500 })
    const [err] = await waitFor('onExit after the watch deadline', () =>
      exits.length > 0 ? exits : null
    )
    assert.ok(err instanceof TimeoutError, `onExit got ${err?.constructor?.name}: ${err?.message}`)
  })

  test('watching a missing directory fails with FileNotFoundError', async (t) => {
    const sbx = await createSandbox(t)
    await rejectsWith(sbx.files.watchDir(`${HOME}/missing-dir`, () => {}), FileNotFoundError)
  })
})
