// URLs the user fetches without the SDK: signed downloadUrl/uploadUrl
// (docs/wire/envd.md §3.7, fetched as-is through E2B_SANDBOX_URL, no routing headers),
// and sandbox ports reached through the sandbox origin (docs/wire/e2b-api.md §1.3).

import assert from 'node:assert/strict'
import http from 'node:http'
import { describe, test } from 'node:test'
import { CONCURRENCY, SANDBOX_URL, createSandbox, uniq, waitFor } from './helpers.mjs'

const HOME = '/home/user'

/** GET via node:http so the Host header can be set (fetch forbids it). */
function getWithHost(url, host) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { host } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => (body += c))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')))
  })
}

/** Starts `python3 -m http.server` serving `dir` on `port` and waits for it. */
async function serveDir(t, sbx, dir, port) {
  const h = await sbx.commands.run(`python3 -m http.server ${port} --bind 0.0.0.0`, {
    background: true,
    cwd: dir,
    timeoutMs: 0,
  })
  t.after(() => h.kill().catch(() => {}))
  await waitFor(`http.server on ${port}`, async () => {
    const r = await sbx.commands.run(
      `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:${port}/ || true`
    )
    return r.stdout.trim() === '200'
  })
}

describe('urls', { concurrency: CONCURRENCY }, () => {
  test('signed downloadUrl is served through E2B_SANDBOX_URL without headers', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('dl/report.txt', 'downloadable content\n')
    const url = await sbx.downloadUrl('dl/report.txt')
    assert.ok(url.startsWith(`${SANDBOX_URL}/files?`), url)
    const u = new URL(url)
    assert.equal(u.searchParams.get('path'), 'dl/report.txt')
    assert.match(u.searchParams.get('signature') ?? '', /^v1_[A-Za-z0-9+/]+$/)

    const res = await fetch(url)
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'downloadable content\n')

    // Absolute paths and an explicit user sign differently and work too.
    const abs = await fetch(await sbx.downloadUrl(`${HOME}/dl/report.txt`, { user: 'user' }))
    assert.equal(abs.status, 200)
    assert.equal(await abs.text(), 'downloadable content\n')
  })

  test('downloadUrl with an expiration works until it expires; expired gives the exact 401', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('exp.txt', 'expiring')

    const valid = await sbx.downloadUrl('exp.txt', { useSignatureExpiration: 120 })
    assert.ok(new URL(valid).searchParams.get('signature_expiration'))
    const ok = await fetch(valid)
    assert.equal(ok.status, 200)
    assert.equal(await ok.text(), 'expiring')

    const expired = await sbx.downloadUrl('exp.txt', { useSignatureExpiration: -60 })
    const res = await fetch(expired)
    assert.equal(res.status, 401)
    assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
  })

  test('a tampered or missing signature is rejected with 401', async (t) => {
    const sbx = await createSandbox(t)
    await sbx.files.write('secret.txt', 'no peeking')
    const good = new URL(await sbx.downloadUrl('secret.txt'))

    const otherPath = new URL(good)
    otherPath.searchParams.set('path', '/etc/passwd')
    const r1 = await fetch(otherPath)
    assert.equal(r1.status, 401)
    assert.deepEqual(await r1.json(), { code: 401, message: 'invalid signature' })

    const noSig = new URL(good)
    noSig.searchParams.delete('signature')
    const r2 = await fetch(noSig)
    // Unsigned URLs carry no sandbox identity at all (docs/wire/e2b-api.md §1.8): any
    // refusal will do, as long as the content does not leak.
    assert.ok(r2.status >= 400, `unsigned download got ${r2.status}`)
    assert.notEqual(await r2.text(), 'no peeking')
  })

  test('signed uploadUrl accepts a multipart POST; the file is written as the user', async (t) => {
    const sbx = await createSandbox(t)
    const url = await sbx.uploadUrl('up/uploaded.txt')
    const form = new FormData()
    form.append('file', new Blob(['uploaded via url']), 'uploaded.txt')
    const res = await fetch(url, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.clone().text())
    const body = await res.json()
    assert.ok(Array.isArray(body))
    assert.equal(body[0].path, `${HOME}/up/uploaded.txt`)

    assert.equal(await sbx.files.read('up/uploaded.txt'), 'uploaded via url')
    assert.equal((await sbx.files.getInfo('up/uploaded.txt')).owner, 'user')

    const expired = await sbx.uploadUrl('up/late.txt', { useSignatureExpiration: -5 })
    const form2 = new FormData()
    form2.append('file', new Blob(['late']), 'late.txt')
    const res2 = await fetch(expired, { method: 'POST', body: form2 })
    assert.equal(res2.status, 401)
    assert.deepEqual(await res2.json(), { code: 401, message: 'signature is already expired' })
    assert.equal(await sbx.files.exists('up/late.txt'), false)

    // A read signature is not a write signature.
    const readSig = new URL(await sbx.downloadUrl('up/uploaded.txt'))
    const form3 = new FormData()
    form3.append('file', new Blob(['overwrite']), 'uploaded.txt')
    const res3 = await fetch(readSig, { method: 'POST', body: form3 })
    assert.equal(res3.status, 401)
    assert.equal(await sbx.files.read('up/uploaded.txt'), 'uploaded via url')
  })

  test('a sandbox port is reachable through the sandbox origin by routing headers', async (t) => {
    const sbx = await createSandbox(t)
    const token = uniq('page')
    await sbx.files.write(`${HOME}/www/index.html`, token)
    await serveDir(t, sbx, `${HOME}/www`, 8000)

    const res = await fetch(`${SANDBOX_URL}/index.html`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' },
    })
    assert.equal(res.status, 200)
    assert.equal(await res.text(), token)
  })

  test('getHost(port) names a host the sandbox origin routes to that port', async (t) => {
    const sbx = await createSandbox(t)
    const token = uniq('host')
    await sbx.files.write(`${HOME}/site/index.html`, token)
    await serveDir(t, sbx, `${HOME}/site`, 8080)

    const host = sbx.getHost(8080)
    assert.ok(host.startsWith(`8080-${sbx.sandboxId}.`), host)
    // Wildcard DNS is not available here, so connect to the sandbox origin
    // and present the host name the SDK returned.
    const res = await getWithHost(`${SANDBOX_URL}/index.html`, host)
    assert.equal(res.status, 200)
    assert.equal(res.body, token)
  })

  test('a port nobody listens on fails cleanly, and an unknown sandbox gives 502', async (t) => {
    const sbx = await createSandbox(t)
    const res = await fetch(`${SANDBOX_URL}/`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '9' },
    })
    assert.ok(res.status >= 400, `closed port answered ${res.status}`)

    const id = uniq('nosuch')
    const gone = await fetch(`${SANDBOX_URL}/health`, {
      headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983' },
    })
    assert.equal(gone.status, 502)
    assert.deepEqual(await gone.json(), {
      sandboxId: id,
      message: 'The sandbox was not found',
      code: 502,
    })
  })
})
