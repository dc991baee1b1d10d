// Volumes through the official SDK: Volume.create, volumeMounts on create,
// data written by one sandbox read by one started later, the volume content
// API (writeFile, readFile, list, getInfo, updateMetadata, remove), delete.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Volume } from 'e2b'
import { CONCURRENCY, createSandbox, uniq } from './helpers.mjs'

if (!process.env.E2B_VOLUME_API_URL) {
  throw new Error('E2B_VOLUME_API_URL is not set: the volume content API is served by the Cubby server (run.sh exports it)')
}

describe('volumes', { concurrency: CONCURRENCY }, () => {
  test('create, mount in two sandboxes, content API, destroy', async (t) => {
    const vol = await Volume.create(uniq('vol'))
    t.after(async () => {
      await Volume.destroy(vol.volumeId).catch(() => {})
    })
    const listed = await Volume.list()
    assert.ok(listed.some((v) => v.volumeId === vol.volumeId && v.name === vol.name))
    const info = await Volume.getInfo(vol.volumeId)
    assert.equal(info.name, vol.name)

    const a = await createSandbox(t, { volumeMounts: { '/mnt/vol': vol } })
    await a.commands.run('echo from-a > /mnt/vol/a.txt')
    await vol.writeFile('/dir/api.txt', 'from the API', { force: true })
    assert.equal(await vol.readFile('/a.txt'), 'from-a\n')

    const b = await createSandbox(t, { volumeMounts: { '/data': vol.name } })
    assert.equal((await b.commands.run('cat /data/a.txt /data/dir/api.txt')).stdout, 'from-a\nfrom the API')
    const entries = await vol.list('/', { depth: 2 })
    assert.deepEqual(entries.map((e) => e.path).sort(), ['/a.txt', '/dir', '/dir/api.txt'])
    const st = await vol.getInfo('/dir/api.txt')
    assert.equal(st.type, 'file')
    assert.equal(st.size, 'from the API'.length)
    const changed = await vol.updateMetadata('/dir/api.txt', { mode: 0o600 })
    assert.equal(changed.mode, 0o600)
    await vol.remove('/dir')
    assert.equal(await vol.exists('/dir/api.txt'), false)
    assert.equal((await a.commands.run('ls /mnt/vol')).stdout, 'a.txt\n')

    await assert.rejects(Volume.destroy(vol.volumeId)) // mounted: refused
    await a.kill()
    await b.kill()
    assert.equal(await Volume.destroy(vol.volumeId), true)
    assert.equal(await Volume.destroy(vol.volumeId), false)
  })
})
