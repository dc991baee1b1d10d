// Behaviours of E2B's envd and API a drop-in server must match exactly, with
// the official e2b SDK: upload watch events, procfs reads, the sandbox's own
// boot_id across pauses, Idempotency-Key, HTTP/2 without TLS (h2c), getHost
// URLs, a second server on the host, and getInfo's pauseMode values.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { readFileSync, mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { Sandbox } from 'e2b'
import { CONCURRENCY, SANDBOX_URL, SUITE_KEY, TEMPLATE, createSandbox, sleep, uniq, waitFor } from './helpers.mjs'

const HOME = '/home/user'
const API_URL = process.env.E2B_API_URL.replace(/\/+$/, '')
const API_KEY = process.env.E2B_API_KEY
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

async function bootId(sbx) {
  return (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
}

function createRaw(key, body) {
  return fetch(`${API_URL}/v2/sandboxes`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-API-Key': API_KEY, 'Idempotency-Key': key },
    body: JSON.stringify(body),
  })
}

/** GET over HTTP/2 with prior knowledge (h2c); resolves to {status, body}. */
function h2get(origin, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(origin)
    session.on('error', reject)
    const req = session.request({ ':path': path, ...headers })
    let status
    let body = ''
    req.setEncoding('utf8')
    req.on('response', (h) => (status = h[':status']))
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      session.close()
      resolve({ status, body })
    })
    req.on('error', (err) => {
      session.destroy()
      reject(err)
    })
    req.setTimeout(15_000, () => req.close(http2.constants.NGHTTP2_CANCEL))
  })
}

function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

/** Starts another `cubby serve`; resolves with its exit code (null if it kept running 60 s) and output. */
async function secondServer(t, bridge, subnet) {
  for (const name of ['CUBBY_BIN', 'CUBBY_COMPAT_BRIDGE', 'CUBBY_COMPAT_SUBNET']) {
    if (!process.env[name]) return t.skip(`${name} not set (run through test/compat/run.sh)`)
  }
  const data = mkdtempSync(join(tmpdir(), 'cubby-second-'))
  const port = await freePort()
  const args = ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', data, '--templates-dir',
    process.env.CUBBY_TEMPLATES_DIR ?? '', '--bridge', bridge, '--subnet', subnet]
  const p = spawn(process.env.CUBBY_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  p.stdout.on('data', (c) => (out += c))
  p.stderr.on('data', (c) => (out += c))
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => {
      p.kill('SIGTERM')
      resolve(null)
    }, 60_000)
    p.on('exit', (c) => {
      clearTimeout(timer)
      resolve(c)
    })
  })
  if (code === null) await new Promise((r) => p.on('close', r))
  rmSync(data, { recursive: true, force: true })
  if (bridge !== process.env.CUBBY_COMPAT_BRIDGE) {
    await new Promise((r) => spawn('sh', ['-c', `ip link del ${bridge}; nft delete table inet cubby_${bridge}`], { stdio: 'ignore' }).on('close', r))
  }
  return { code, out }
}

async function pauseFields(id) {
  const res = await fetch(`${API_URL}/sandboxes/${id}`, { headers: { 'X-API-Key': API_KEY } })
  assert.equal(res.status, 200)
  const d = await res.json()
  return [d.pauseMode ?? null, d.cubbyPauseMethod ?? null]
}

describe('E2B parity', { concurrency: CONCURRENCY }, () => {
  test('an upload is watched as CREATE, CHMOD, WRITE (new) and CHMOD, WRITE (existing)', async (t) => {
    const sbx = await createSandbox(t)
    const dir = `${HOME}/upl`
    await sbx.files.makeDir(dir)
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
    t.after(() => handle.stop())
    const uploadEvents = async (name) => {
      await waitFor(`WRITE ${name}`, () => events.some((e) => e.name === name && e.type === 'write'), { timeoutMs: 15_000 })
      await sleep(500)
      const got = events.filter((e) => e.name === name).map((e) => e.type)
      events.length = 0
      return got
    }
    await sbx.files.write(`${dir}/new.txt`, 'one')
    assert.deepEqual(await uploadEvents('new.txt'), ['create', 'chmod', 'write'])
    await sbx.files.write(`${dir}/new.txt`, 'two')
    assert.deepEqual(await uploadEvents('new.txt'), ['chmod', 'write'])
  })

  test('procfs files are read in full', async (t) => {
    const sbx = await createSandbox(t)
    assert.match((await sbx.files.read('/proc/sys/kernel/random/boot_id')).trim(), UUID_RE)
    assert.ok((await sbx.files.read('/proc/version')).startsWith('Linux version'))
    const bytes = await sbx.files.read('/proc/meminfo', { format: 'bytes' })
    assert.ok(Buffer.from(bytes).toString().includes('MemTotal'))
  })

  test("the sandbox's boot_id is its own and changes when a filesystem resume boots it again", async (t) => {
    const sbx = await createSandbox(t)
    const first = await bootId(sbx)
    assert.match(first, UUID_RE)
    assert.notEqual(first, readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(), "the host's boot_id")
    assert.equal(await sbx.pause(), true)
    await sbx.connect({ timeoutMs: 300_000 })
    assert.equal(await bootId(sbx), first, 'a full pause is not a reboot')
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    await sbx.connect({ timeoutMs: 300_000 })
    const again = await bootId(sbx)
    assert.match(again, UUID_RE)
    assert.notEqual(again, first, 'a filesystem resume boots the sandbox again')
  })

  test('the same Idempotency-Key creates one sandbox', async () => {
    const key = `k-${randomUUID()}`
    const body = { templateID: TEMPLATE, timeout: 120, metadata: { [SUITE_KEY]: 'js' } }
    const first = await createRaw(key, body)
    assert.equal(first.status, 201, await first.clone().text())
    const { sandboxID } = await first.json()
    try {
      const [a, b] = await Promise.all([createRaw(key, body), createRaw(key, body)])
      assert.deepEqual([a.status, b.status], [201, 201])
      assert.deepEqual([(await a.json()).sandboxID, (await b.json()).sandboxID], [sandboxID, sandboxID])
      const other = await createRaw(key, { ...body, timeout: 60 })
      assert.equal(other.status, 409)
      assert.equal((await other.json()).error_code, 'idempotency_request_mismatch')
    } finally {
      await Sandbox.kill(sandboxID)
    }
  })

  test('HTTP/2 without TLS (h2c) reaches the API and envd', async (t) => {
    const health = await h2get(API_URL, '/health')
    assert.equal(health.status, 200)
    const list = await h2get(API_URL, '/v2/sandboxes', { 'x-api-key': API_KEY })
    assert.equal(list.status, 200)
    assert.ok(Array.isArray(JSON.parse(list.body)))
    const sbx = await createSandbox(t)
    const envd = await h2get(SANDBOX_URL, '/health', { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': '49983' })
    assert.equal(envd.status, 204)
  })

  test("getHost(port) names the server's listener and routes to the port", async (t) => {
    const sbx = await createSandbox(t)
    const port = new URL(SANDBOX_URL).port
    const host = sbx.getHost(8000)
    assert.ok(host.startsWith(`8000-${sbx.sandboxId}.`) && host.endsWith(`:${port}`), host)
    const token = uniq('h')
    await sbx.files.write(`${HOME}/gh/index.html`, token)
    const h = await sbx.commands.run('python3 -m http.server 8000', { background: true, cwd: `${HOME}/gh`, timeoutMs: 0 })
    t.after(() => h.kill().catch(() => {}))
    const get = () =>
      new Promise((resolve) => {
        const req = http.get(`http://127.0.0.1:${port}/index.html`, { headers: { host } }, (res) => {
          let body = ''
          res.on('data', (c) => (body += c))
          res.on('end', () => resolve(res.statusCode === 200 ? body : null))
        })
        req.on('error', () => resolve(null))
      })
    assert.equal(await waitFor("the sandbox's web server", get, { timeoutMs: 20_000 }), token)
  })

  test('a second server refuses an overlapping subnet', async (t) => {
    const r = await secondServer(t, `cbjs${randomUUID().slice(0, 6)}`, process.env.CUBBY_COMPAT_SUBNET)
    if (!r) return
    assert.ok(r.code !== null && r.code !== 0, `it started:\n${r.out.slice(-2000)}`)
    assert.ok(r.out.includes('overlaps') && r.out.includes(process.env.CUBBY_COMPAT_BRIDGE), r.out.slice(-2000))
  })

  test("a second server refuses a live server's bridge", async (t) => {
    const subnet = `10.253.${Math.floor(Math.random() * 250)}.0/24`
    const r = await secondServer(t, process.env.CUBBY_COMPAT_BRIDGE, subnet)
    if (!r) return
    assert.ok(r.code !== null && r.code !== 0, `it started:\n${r.out.slice(-2000)}`)
    assert.ok(r.out.includes(`pid ${process.env.CUBBY_COMPAT_SERVER_PID}`), r.out.slice(-2000))
  })

  test("getInfo's pauseMode is E2B's full or filesystem", async (t) => {
    const sbx = await createSandbox(t)
    assert.deepEqual(await pauseFields(sbx.sandboxId), [null, null])
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    const [mode, method] = await pauseFields(sbx.sandboxId)
    assert.equal(mode, 'full')
    assert.ok(['freeze', 'checkpoint'].includes(method), method)
    await sbx.connect({ timeoutMs: 300_000 })
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.deepEqual(await pauseFields(sbx.sandboxId), ['filesystem', 'filesystem'])
  })
})
