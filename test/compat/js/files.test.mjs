// sandbox.files: envd REST /files (upload/download, docs/wire/envd.md §3.4) and the
// filesystem.Filesystem RPCs (Stat, ListDir, MakeDir, Move, Remove, §3.3).

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, test } from 'node:test'
import { FileNotFoundError, InvalidArgumentError } from 'e2b'
import {
  CONCURRENCY,
  assertDate,
  createSandbox,
  patternBytes,
  readAll,
  rejectsWith,
} from './helpers.mjs'

const HOME = '/home/user'

function toArrayBuffer(u8) {
  return u8.buffer.slice(u8.byteOffset, u8.byteOffset + u8.byteLength)
}

function sha256(u8) {
  return createHash('sha256').update(u8).digest('hex')
}

function streamOf(chunks) {
  return new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(c)
      controller.close()
    },
  })
}

describe('files', { concurrency: CONCURRENCY }, () => {
  test('write and read text; relative paths resolve against the user home', async (t) => {
    const sbx = await createSandbox(t)
    const text = 'Hello, Cubby!\nünïcødé ✓ 🚀\n'
    const info = await sbx.files.write('hello.txt', text)
    assert.equal(info.name, 'hello.txt')
    assert.equal(info.path, `${HOME}/hello.txt`)
    assert.equal(info.type, 'file')

    assert.equal(await sbx.files.read('hello.txt'), text)
    assert.equal(await sbx.files.read(`${HOME}/hello.txt`), text)
    assert.equal(await sbx.files.read('~/hello.txt'), text)

    // The file is really there for processes in the sandbox.
    const r = await sbx.commands.run('cat /home/user/hello.txt')
    assert.equal(r.stdout, text)
  })

  test('bytes round-trip in every read format, including gzip', async (t) => {
    const sbx = await createSandbox(t)
    const all = new Uint8Array(256).map((_, i) => i)
    const data = new Uint8Array(256 + 300_000)
    data.set(all, 0)
    data.set(patternBytes(300_000), 256)

    await sbx.files.write('bin/data.bin', toArrayBuffer(data))

    const bytes = await sbx.files.read('bin/data.bin', { format: 'bytes' })
    assert.ok(bytes instanceof Uint8Array)
    assert.equal(sha256(bytes), sha256(data))

    const blob = await sbx.files.read('bin/data.bin', { format: 'blob' })
    assert.equal(blob.size, data.length)
    assert.equal(sha256(new Uint8Array(await blob.arrayBuffer())), sha256(data))

    const stream = await sbx.files.read('bin/data.bin', { format: 'stream' })
    assert.equal(sha256(await readAll(stream)), sha256(data))

    const gz = await sbx.files.read('bin/data.bin', { format: 'bytes', gzip: true })
    assert.equal(sha256(gz), sha256(data))

    const r = await sbx.commands.run('sha256sum /home/user/bin/data.bin')
    assert.equal(r.stdout.split(' ')[0], sha256(data))
  })

  test('stream, Blob and gzip uploads', async (t) => {
    const sbx = await createSandbox(t)
    const part1 = patternBytes(70_000, 1)
    const part2 = patternBytes(50_000, 2)
    const joined = new Uint8Array(part1.length + part2.length)
    joined.set(part1, 0)
    joined.set(part2, part1.length)

    const s = await sbx.files.write('up/stream.bin', streamOf([part1, part2]))
    assert.equal(s.path, `${HOME}/up/stream.bin`)
    assert.equal(sha256(await sbx.files.read('up/stream.bin', { format: 'bytes' })), sha256(joined))

    await sbx.files.write('up/blob.bin', new Blob([part2]))
    assert.equal(sha256(await sbx.files.read('up/blob.bin', { format: 'bytes' })), sha256(part2))

    await sbx.files.write('up/gz.txt', 'compressed text '.repeat(1000), { gzip: true })
    assert.equal(await sbx.files.read('up/gz.txt'), 'compressed text '.repeat(1000))

    await sbx.files.write('up/octet.txt', 'plain octet', { useOctetStream: true })
    assert.equal(await sbx.files.read('up/octet.txt'), 'plain octet')
  })

  test('large file (8 MiB) round-trip', async (t) => {
    const sbx = await createSandbox(t)
    const data = patternBytes(8 * 1024 * 1024, 99)
    await sbx.files.write('/tmp/large.bin', toArrayBuffer(data))
    const info = await sbx.files.getInfo('/tmp/large.bin')
    assert.equal(info.size, data.length)
    const back = await sbx.files.read('/tmp/large.bin', { format: 'bytes' })
    assert.equal(back.length, data.length)
    assert.equal(sha256(back), sha256(data))
  })

  test('empty file; overwrite truncates', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('empty.txt', '')
    assert.equal(await sbx.files.read('empty.txt'), '')
    assert.equal((await sbx.files.read('empty.txt', { format: 'bytes' })).length, 0)
    assert.equal((await sbx.files.getInfo('empty.txt')).size, 0)

    await sbx.files.write('over.txt', 'a much longer first version')
    await sbx.files.write('over.txt', 'short')
    assert.equal(await sbx.files.read('over.txt'), 'short')
  })

  test('multi-file write keeps each destination path', async (t) => {
    const sbx = await createSandbox(t)
    const infos = await sbx.files.write([
      { path: 'multi/a.txt', data: 'A' },
      { path: `${HOME}/multi/nested/b.txt`, data: 'BB' },
      { path: '/tmp/multi-c.bin', data: toArrayBuffer(new Uint8Array([0, 1, 2])) },
    ])
    assert.equal(infos.length, 3)
    assert.deepEqual(
      infos.map((i) => i.path).sort(),
      [`${HOME}/multi/a.txt`, `${HOME}/multi/nested/b.txt`, '/tmp/multi-c.bin'].sort()
    )
    assert.equal(await sbx.files.read('multi/a.txt'), 'A')
    assert.equal(await sbx.files.read('multi/nested/b.txt'), 'BB')
    assert.deepEqual(
      Array.from(await sbx.files.read('/tmp/multi-c.bin', { format: 'bytes' })),
      [0, 1, 2]
    )

    const viaWriteFiles = await sbx.files.writeFiles([
      { path: 'wf/1.txt', data: 'one' },
      { path: 'wf/2.txt', data: 'two' },
    ])
    assert.equal(viaWriteFiles.length, 2)
    assert.equal(await sbx.files.read('wf/2.txt'), 'two')
  })

  test('list honours depth and walks in lexical depth-first order', async (t) => {
    const sbx = await createSandbox(t)
    const base = `${HOME}/tree`
    await sbx.files.write([
      { path: `${base}/file1.txt`, data: '1' },
      { path: `${base}/subdir1/subdir1_1/deep.txt`, data: 'deep' },
      { path: `${base}/subdir2/file2.txt`, data: '2' },
    ])
    assert.equal(await sbx.files.makeDir(`${base}/subdir1/subdir1_2`), true)

    const depth1 = await sbx.files.list(base)
    assert.deepEqual(
      depth1.map((e) => e.path),
      [`${base}/file1.txt`, `${base}/subdir1`, `${base}/subdir2`]
    )
    assert.deepEqual(depth1.map((e) => e.name), ['file1.txt', 'subdir1', 'subdir2'])
    assert.deepEqual(depth1.map((e) => e.type), ['file', 'dir', 'dir'])

    const depth2 = await sbx.files.list(base, { depth: 2 })
    assert.deepEqual(
      depth2.map((e) => e.path),
      [
        `${base}/file1.txt`,
        `${base}/subdir1`,
        `${base}/subdir1/subdir1_1`,
        `${base}/subdir1/subdir1_2`,
        `${base}/subdir2`,
        `${base}/subdir2/file2.txt`,
      ]
    )

    const depth3 = await sbx.files.list(base, { depth: 3 })
    assert.ok(depth3.some((e) => e.path === `${base}/subdir1/subdir1_1/deep.txt`))
    assert.equal(depth3.length, 7)

    await rejectsWith(sbx.files.list(`${base}/missing`), FileNotFoundError)
  })

  test('exists and getInfo (type, size, permissions, owner, mtime)', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('info/file.txt', '12345')
    assert.equal(await sbx.files.exists('info/file.txt'), true)
    assert.equal(await sbx.files.exists('info'), true)
    assert.equal(await sbx.files.exists('info/nope.txt'), false)

    const f = await sbx.files.getInfo('info/file.txt')
    assert.equal(f.name, 'file.txt')
    assert.equal(f.path, `${HOME}/info/file.txt`)
    assert.equal(f.type, 'file')
    assert.equal(f.size, 5)
    assert.equal(f.permissions, '-rw-r--r--')
    assert.equal(f.mode & 0o777, 0o644)
    assert.equal(f.owner, 'user')
    assert.equal(f.group, 'user')
    assertDate(f.modifiedTime, 'modifiedTime')
    assert.ok(Math.abs(f.modifiedTime.getTime() - Date.now()) < 120_000, 'mtime is far off')

    const d = await sbx.files.getInfo('info')
    assert.equal(d.type, 'dir')
    assert.equal(d.permissions, 'drwxr-xr-x')
    assert.equal(d.owner, 'user')

    await sbx.commands.run('ln -s /home/user/info/file.txt /home/user/info/link')
    const l = await sbx.files.getInfo('info/link')
    assert.equal(l.symlinkTarget, `${HOME}/info/file.txt`)
    assert.equal(l.name, 'link')

    await rejectsWith(sbx.files.getInfo('info/nope.txt'), FileNotFoundError)
  })

  test('makeDir returns true, then false; creates parents; rejects over a file', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal(await sbx.files.makeDir('mk/a/b/c'), true)
    assert.equal(await sbx.files.makeDir('mk/a/b/c'), false)
    const info = await sbx.files.getInfo('mk/a')
    assert.equal(info.type, 'dir')
    assert.equal(info.owner, 'user')
    assert.equal(info.permissions, 'drwxr-xr-x')

    await sbx.files.write('mk/file', 'x')
    await rejectsWith(sbx.files.makeDir('mk/file'), InvalidArgumentError)
  })

  test('rename moves files and directories; missing source is FileNotFoundError', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('mv/old.txt', 'content')
    const moved = await sbx.files.rename('mv/old.txt', 'mv/new.txt')
    assert.equal(moved.name, 'new.txt')
    assert.equal(moved.path, `${HOME}/mv/new.txt`)
    assert.equal(await sbx.files.exists('mv/old.txt'), false)
    assert.equal(await sbx.files.read('mv/new.txt'), 'content')

    const dir = await sbx.files.rename('mv', 'mv2')
    assert.equal(dir.type, 'dir')
    assert.equal(await sbx.files.read('mv2/new.txt'), 'content')

    await rejectsWith(sbx.files.rename('does-not-exist', 'x'), FileNotFoundError)
  })

  test('remove deletes files and whole trees; a missing path is not an error', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write([
      { path: 'rm/a.txt', data: 'a' },
      { path: 'rm/sub/b.txt', data: 'b' },
    ])
    await sbx.files.remove('rm/a.txt')
    assert.equal(await sbx.files.exists('rm/a.txt'), false)
    await sbx.files.remove('rm')
    assert.equal(await sbx.files.exists('rm'), false)
    await sbx.files.remove('rm') // already gone
    await sbx.files.remove('/tmp/never-existed-' + Date.now())
  })

  test('user root writes land in /root and are owned by root', async (t) => {
    const sbx = await createSandbox(t)
    const info = await sbx.files.write('root-file.txt', 'root data', { user: 'root' })
    assert.equal(info.path, '/root/root-file.txt')
    assert.equal(await sbx.files.read('/root/root-file.txt', { user: 'root' }), 'root data')
    assert.equal(await sbx.files.read('root-file.txt', { user: 'root' }), 'root data')

    const st = await sbx.files.getInfo('/root/root-file.txt', { user: 'root' })
    assert.equal(st.owner, 'root')

    const listed = await sbx.files.list('~', { user: 'root' })
    assert.ok(listed.some((e) => e.path === '/root/root-file.txt'), 'root home listing')

    assert.equal(await sbx.files.makeDir('root-dir', { user: 'root' }), true)
    const r = await sbx.commands.run('stat -c %U /root/root-dir', { user: 'root' })
    assert.equal(r.stdout.trim(), 'root')

    // The default user's files stay owned by `user`.
    const u = await sbx.files.write('user-file.txt', 'u')
    assert.equal(u.path, `${HOME}/user-file.txt`)
    assert.equal((await sbx.files.getInfo('user-file.txt')).owner, 'user')
  })

  test('file metadata is stored with lowercased keys and replaced on every upload', async (t) => {
    const sbx = await createSandbox(t)
    const info = await sbx.files.write('meta.txt', 'm', {
      metadata: { Purpose: 'Test Run', 'x-id': '42' },
    })
    assert.deepEqual(info.metadata, { purpose: 'Test Run', 'x-id': '42' })

    const st = await sbx.files.getInfo('meta.txt')
    assert.deepEqual(st.metadata, { purpose: 'Test Run', 'x-id': '42' })

    const listed = await sbx.files.list(HOME)
    const entry = listed.find((e) => e.name === 'meta.txt')
    assert.deepEqual(entry.metadata, { purpose: 'Test Run', 'x-id': '42' })

    // A new upload without metadata clears it.
    const plain = await sbx.files.write('meta.txt', 'm2')
    assert.ok(!plain.metadata || Object.keys(plain.metadata).length === 0)
    const st2 = await sbx.files.getInfo('meta.txt')
    assert.ok(!st2.metadata || Object.keys(st2.metadata).length === 0, 'metadata not cleared')

    // The SDK validates characters client-side; size limits are the server's
    // (a key may be at most 246 bytes, docs/wire/envd.md §3.4).
    await rejectsWith(
      sbx.files.write('bad-meta.txt', 'x', { metadata: { ['k'.repeat(300)]: 'v' } }),
      InvalidArgumentError
    )
  })

  test('reading a missing file is FileNotFoundError; reading a directory is rejected', async (t) => {
    const sbx = await createSandbox(t)
    await rejectsWith(sbx.files.read('no/such/file.txt'), FileNotFoundError)
    await rejectsWith(sbx.files.read('/no/such/file', { format: 'bytes' }), FileNotFoundError)
    await rejectsWith(sbx.files.read('/tmp'), InvalidArgumentError)
  })
})
