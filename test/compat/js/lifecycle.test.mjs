// Sandbox lifecycle through the control plane (docs/wire/e2b-api.md §2.3): create (v2),
// getInfo, connect, setTimeout, kill, isRunning, getMetrics, pause and resume
// through connect.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import {
  CONCURRENCY,
  SANDBOX_URL,
  SUITE_KEY,
  assertDate,
  assertNear,
  createSandbox,
  rejectsWith,
  sleep,
  uniq,
  waitFor,
} from './helpers.mjs'

/** Parses "MAJOR.MINOR.PATCH[-pre][+build]" into [major, minor, patch]. */
function semver(v) {
  const m = /^(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/.exec(v)
  assert.ok(m, `envdVersion ${JSON.stringify(v)} is not semver`)
  return m.slice(1, 4).map(Number)
}

function semverAtLeast(v, min) {
  const a = semver(v)
  const b = semver(min)
  for (let i = 0; i < 3; i++) {
    if (a[i] !== b[i]) return a[i] > b[i]
  }
  return true
}

describe('lifecycle', { concurrency: CONCURRENCY }, () => {
  test('create (v2) with metadata, envs and timeout; getInfo reports them', async (t) => {
    const metadata = { owner: uniq('o'), 'k y': 'v&1', spaced: 'a b=c', [SUITE_KEY]: 'js' }
    const before = Date.now()
    const sbx = await createSandbox(t, {
      metadata,
      envs: { CUBBY_CREATE_ENV: 'from-create' },
      timeoutMs: 120_000,
    })

    assert.match(sbx.sandboxId, /^[a-z0-9]+$/, 'sandbox IDs must be lowercase alphanumerics')

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(typeof info.templateId, 'string')
    assert.ok(info.templateId.length > 0, 'templateId is empty')
    assert.deepEqual(info.metadata, metadata, 'metadata must come back exactly as sent')
    assert.equal(info.state, 'running')
    assert.ok(Number.isInteger(info.cpuCount) && info.cpuCount >= 1, `cpuCount ${info.cpuCount}`)
    assert.ok(Number.isInteger(info.memoryMB) && info.memoryMB >= 1, `memoryMB ${info.memoryMB}`)
    assert.ok(semverAtLeast(info.envdVersion, '0.6.4'), `envdVersion ${info.envdVersion} < 0.6.4`)
    assertDate(info.startedAt, 'startedAt')
    assertDate(info.endAt, 'endAt')
    assertNear(info.startedAt, (before + Date.now()) / 2, 30_000, 'startedAt')
    assertNear(info.endAt.getTime() - info.startedAt.getTime(), 120_000, 3_000, 'endAt - startedAt')

    // The static variant hits the same endpoint.
    const info2 = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info2.sandboxId, sbx.sandboxId)
    assert.deepEqual(info2.metadata, metadata)

    // Sandbox-level envVars become the default env of every process.
    const r = await sbx.commands.run('echo "$CUBBY_CREATE_ENV"')
    assert.equal(r.stdout, 'from-create\n')
  })

  test('create without options uses the default template and works', async (t) => {
    const sbx = await Sandbox.create({ metadata: { [SUITE_KEY]: 'js' } })
    t.after(() => sbx.kill().catch(() => {}))
    assert.ok(await sbx.isRunning())
    const r = await sbx.commands.run('whoami')
    assert.equal(r.stdout.trim(), 'user')
    const info = await sbx.getInfo()
    assertNear(info.endAt.getTime() - info.startedAt.getTime(), 300_000, 3_000, 'default timeout')
  })

  test('connect attaches to a running sandbox and only extends endAt', async (t) => {
    const sbx = await createSandbox(t, { timeoutMs: 120_000 })
    const info0 = await sbx.getInfo()

    // A shorter timeout on connect must not shorten the deadline.
    const same = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 })
    assert.equal(same.sandboxId, sbx.sandboxId)
    const r = await same.commands.run('echo connected')
    assert.equal(r.stdout, 'connected\n')
    const info1 = await sbx.getInfo()
    assert.ok(
      info1.endAt.getTime() >= info0.endAt.getTime() - 1_000,
      `connect shortened endAt: ${info0.endAt.toISOString()} -> ${info1.endAt.toISOString()}`
    )

    // A longer one extends it, measured from now.
    const before = Date.now()
    const again = await sbx.connect({ timeoutMs: 600_000 })
    assert.equal(again.sandboxId, sbx.sandboxId)
    const info2 = await sbx.getInfo()
    assert.ok(info2.endAt.getTime() > info0.endAt.getTime(), 'connect did not extend endAt')
    assertNear(info2.endAt, before + 600_000, 5_000, 'endAt after connect(600s)')
  })

  test('connect to an unknown sandbox fails with SandboxNotFoundError', async () => {
    await rejectsWith(Sandbox.connect(uniq('nosuch')), SandboxNotFoundError)
  })

  test('setTimeout shortens: the sandbox is gone about a second after the deadline', async (t) => {
    const sbx = await createSandbox(t, { timeoutMs: 300_000 })
    const t0 = Date.now()
    await sbx.setTimeout(5_000)
    const info = await sbx.getInfo()
    assertNear(info.endAt, t0 + 5_000, 2_000, 'endAt after setTimeout(5000)')
    assert.equal(await sbx.isRunning(), true, 'killed long before its deadline')

    await sleep(t0 + 6_500 - Date.now())
    assert.equal(await sbx.isRunning(), false, 'still running 1.5 s after its deadline')
    await rejectsWith(sbx.getInfo(), SandboxNotFoundError)
  })

  test('setTimeout extends, and a later call replaces the deadline', async (t) => {
    const sbx = await createSandbox(t, { timeoutMs: 4_000 })
    const created = Date.now()
    await sbx.setTimeout(30_000)
    const info1 = await sbx.getInfo()
    assertNear(info1.endAt, Date.now() + 30_000, 3_000, 'endAt after setTimeout(30000)')

    await sleep(created + 6_000 - Date.now())
    assert.equal(await sbx.isRunning(), true, 'extended sandbox died at its original deadline')

    // Replacing with a shorter value is measured from now.
    const t1 = Date.now()
    await Sandbox.setTimeout(sbx.sandboxId, 10_000)
    const info2 = await sbx.getInfo()
    assertNear(info2.endAt, t1 + 10_000, 2_000, 'endAt after setTimeout(10000)')
    assert.ok(info2.endAt < info1.endAt, 'setTimeout did not replace the later deadline')
  })

  test('kill returns true, then false; isRunning turns false', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal(await sbx.isRunning(), true)
    assert.equal(await sbx.kill(), true)
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    assert.equal(await sbx.kill(), false)
  })

  test('Sandbox.kill of an unknown ID returns false', async () => {
    assert.equal(await Sandbox.kill(uniq('nosuch')), false)
  })

  test('getMetrics returns samples with every field within a few seconds', async (t) => {
    const sbx = await createSandbox(t)
    const created = Date.now()
    const metrics = await waitFor(
      'a metrics sample',
      async () => {
        const m = await sbx.getMetrics()
        return m.length > 0 ? m : null
      },
      { timeoutMs: 15_000, intervalMs: 500 }
    )
    for (const m of metrics) {
      assertDate(m.timestamp, 'metric timestamp')
      assertNear(m.timestamp, created, 60_000, 'metric timestamp')
      assert.ok(Number.isInteger(m.cpuCount) && m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
      assert.equal(typeof m.cpuUsedPct, 'number')
      assert.ok(m.cpuUsedPct >= 0, `cpuUsedPct ${m.cpuUsedPct}`)
      assert.ok(m.memTotal > 0, `memTotal ${m.memTotal}`)
      assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal, `memUsed ${m.memUsed}`)
      assert.ok(m.memCache >= 0, `memCache ${m.memCache}`)
      assert.ok(m.diskTotal > 0, `diskTotal ${m.diskTotal}`)
      assert.ok(m.diskUsed >= 0 && m.diskUsed <= m.diskTotal, `diskUsed ${m.diskUsed}`)
    }

    // A range that ends before the sandbox existed is empty.
    const old = await sbx.getMetrics({
      start: new Date(created - 3_600_000),
      end: new Date(created - 3_000_000),
    })
    assert.deepEqual(old, [])

    // Samples respect start/end (10 s slack allowed).
    const start = new Date(created - 5_000)
    const end = new Date(Date.now() + 5_000)
    const ranged = await sbx.getMetrics({ start, end })
    assert.ok(ranged.length >= 1, 'no sample inside a range covering the whole life')
    for (const m of ranged) {
      assert.ok(m.timestamp.getTime() >= start.getTime() - 10_000, 'sample before start')
      assert.ok(m.timestamp.getTime() <= end.getTime() + 10_000, 'sample after end')
    }
  })

  test('pause keeps files and a background process; connect resumes it', async (t) => {
    const sbx = await createSandbox(t, { timeoutMs: 120_000 })
    const marker = uniq('kept')
    await sbx.files.write('/home/user/kept.txt', marker)
    const bg = await sbx.commands.run('sleep 600', { background: true })
    await bg.disconnect()

    assert.equal(await sbx.pause(), true, 'first pause')
    assert.equal(await sbx.pause(), false, 'pausing a paused sandbox is a 409 -> false')
    assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'static pause of a paused sandbox')
    const paused = await sbx.getInfo()
    assert.equal(paused.state, 'paused')
    assert.equal(await sbx.isRunning(), false, 'the sandbox side answers 502 while paused')
    const res = await fetch(`${SANDBOX_URL}/health`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' },
    })
    await res.arrayBuffer()
    assert.equal(res.status, 502, '/health through the sandbox URL while paused')

    const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
    assert.equal(resumed.sandboxId, sbx.sandboxId)
    assert.equal((await resumed.getInfo()).state, 'running')
    assert.equal(await resumed.isRunning(), true)
    assert.equal(await resumed.files.read('/home/user/kept.txt'), marker)
    const procs = await resumed.commands.list()
    const sleeper = procs.find((p) => p.pid === bg.pid)
    assert.ok(sleeper, `background process ${bg.pid} gone after resume: ${JSON.stringify(procs)}`)
    assert.ok(
      [sleeper.cmd, ...sleeper.args].join(' ').includes('sleep 600'),
      `pid ${bg.pid} is ${JSON.stringify(sleeper)}`
    )
    const r = await resumed.commands.run(`kill -0 ${bg.pid} && echo alive`)
    assert.equal(r.stdout, 'alive\n', 'the background process runs after resume')
  })

  test('pause with keepMemory false keeps files; connect resumes it', async (t) => {
    const sbx = await createSandbox(t, { timeoutMs: 120_000 })
    const marker = uniq('disk')
    await sbx.files.write('/home/user/disk.txt', marker)
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal(await sbx.isRunning(), false)
    await sbx.connect({ timeoutMs: 120_000 })
    assert.equal((await sbx.getInfo()).state, 'running')
    assert.equal(await sbx.files.read('/home/user/disk.txt'), marker)
    const r = await sbx.commands.run('echo back')
    assert.equal(r.stdout, 'back\n')
  })

  test('pause and connect of a killed sandbox fail with SandboxNotFoundError', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal(await sbx.pause(), true)
    assert.equal(await sbx.kill(), true, 'kill of a paused sandbox')
    await rejectsWith(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
    await rejectsWith(sbx.pause(), SandboxNotFoundError)
  })
})
