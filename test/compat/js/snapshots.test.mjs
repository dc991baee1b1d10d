// Snapshots and fork through the official SDK: createSnapshot, sandboxes
// started from a snapshot (its ID as the template), listSnapshots with its
// filters, deleteSnapshot, and fork with independent forks.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Sandbox } from 'e2b'
import { CONCURRENCY, SUITE_KEY, createSandbox, uniq } from './helpers.mjs'

/** Writes the state the tests look for into sbx and returns its marker. */
async function prepare(sbx) {
  const marker = uniq('m')
  await sbx.files.write('/home/user/state/marker.txt', marker)
  await sbx.commands.run('head -c 1M /dev/urandom > /home/user/state/blob && sha256sum /home/user/state/blob > /home/user/state/blob.sum')
  return marker
}

/** Checks that sbx holds what prepare wrote. */
async function checkState(sbx, marker) {
  assert.equal(await sbx.files.read('/home/user/state/marker.txt'), marker)
  const sum = await sbx.commands.run('sha256sum -c --quiet /home/user/state/blob.sum && echo ok')
  assert.equal(sum.stdout, 'ok\n')
}

/** Starts a sandbox from a snapshot and kills it after the test. */
async function fromSnapshot(t, snapshotId) {
  const sbx = await Sandbox.create(snapshotId, { timeoutMs: 120_000, metadata: { [SUITE_KEY]: 'js' } })
  t.after(async () => {
    await sbx.kill().catch(() => {})
  })
  return sbx
}

describe('snapshots', { concurrency: CONCURRENCY }, () => {
  test('createSnapshot, three sandboxes from it, list, delete', async (t) => {
    const src = await createSandbox(t)
    const marker = await prepare(src)
    const name = uniq('snap')
    const snap = await src.createSnapshot({ name })
    assert.match(snap.snapshotId, new RegExp(`/${name}:default$`))
    assert.deepEqual(snap.names, [snap.snapshotId])
    await src.files.write('/home/user/state/after.txt', 'later') // the source runs on
    const kids = await Promise.all([0, 1, 2].map(() => fromSnapshot(t, snap.snapshotId)))
    for (const kid of kids) {
      assert.notEqual(kid.sandboxId, src.sandboxId)
      await checkState(kid, marker)
      assert.equal(await kid.files.exists('/home/user/state/after.txt'), false)
    }
    await kids[0].files.write('/home/user/state/marker.txt', 'changed')
    assert.equal(await kids[1].files.read('/home/user/state/marker.txt'), marker)

    const listed = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
    assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName.map((s) => s.snapshotId), [snap.snapshotId])

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    await assert.rejects(Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 }))
    await checkState(kids[2], marker) // sandboxes started from it keep their files
  })

  test('fork x5: each a new, independent sandbox with the same files', async (t) => {
    const src = await createSandbox(t, { envs: { FORKED: 'yes' } })
    const marker = await prepare(src)
    const forks = await src.fork({ count: 5, timeoutMs: 120_000 })
    t.after(async () => {
      await Promise.all(forks.map((f) => (f instanceof Sandbox ? f.kill().catch(() => {}) : null)))
    })
    assert.equal(forks.length, 5)
    const ids = new Set([src.sandboxId])
    for (const [i, f] of forks.entries()) {
      assert.ok(f instanceof Sandbox, `fork ${i}: ${f}`)
      assert.ok(!ids.has(f.sandboxId))
      ids.add(f.sandboxId)
      await checkState(f, marker)
      assert.equal((await f.commands.run('echo $FORKED')).stdout, 'yes\n')
      await f.files.write('/home/user/state/marker.txt', `fork-${i}`)
    }
    for (const [i, f] of forks.entries()) {
      assert.equal(await f.files.read('/home/user/state/marker.txt'), `fork-${i}`)
    }
    assert.equal(await src.files.read('/home/user/state/marker.txt'), marker)
    await assert.rejects(src.fork({ count: 0 }))
    await assert.rejects(src.fork({ count: 101 }))
  })
})
