// Issue 11 under gVisor through the official JS SDK, unchanged, configured
// only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: a code-interpreter
// sandbox sets x = 42 and writes a file; createSnapshot; 3 sandboxes started
// from the snapshot ID each have x == 42 and the file under their own sandbox
// ID, and a change of x in one leaves the others alone; then fork({count: 5})
// of the source: each fork has x == 42 and the file and is independent.
// Everything is killed and the snapshot deleted. Prints one JSON line
// {"ok":true,...}; throws (exit code 1) on any mismatch.
// (test/integration/sdk_gvisor_test.go runs it.)
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const PATH = '/home/user/kept.txt'
const CONTENT = 'written before the snapshot\n'

// xOf is the value of x in the sandbox's default Python context, as text.
async function xOf(sbx) {
  const ex = await sbx.runCode('x')
  assert.equal(ex.error, undefined, `${sbx.sandboxId}: x: ${JSON.stringify(ex.error)}`)
  return ex.text
}

// checkCopy: sbx is a new sandbox (its own ID) holding x == 42 and the file.
async function checkCopy(sbx, seen) {
  assert.ok(!seen.has(sbx.sandboxId), `sandbox ID ${sbx.sandboxId} reused`)
  seen.add(sbx.sandboxId)
  assert.equal(await xOf(sbx), '42', `${sbx.sandboxId}: x`)
  assert.equal(await sbx.files.read(PATH), CONTENT, `${sbx.sandboxId}: ${PATH}`)
  const host = await sbx.commands.run('hostname')
  assert.equal(host.stdout.trim(), sbx.sandboxId, 'hostname')
}

// checkIndependent: each copy sets its own x; no other copy nor the source sees it.
async function checkIndependent(copies, source) {
  for (const [i, sbx] of copies.entries()) {
    assert.equal((await sbx.runCode(`x = ${100 + i}`)).error, undefined)
  }
  for (const [i, sbx] of copies.entries()) {
    assert.equal(await xOf(sbx), String(100 + i), `${sbx.sandboxId}: x`)
  }
  assert.equal(await xOf(source), '42', 'source: x')
}

const template = process.argv[2] ?? 'code-interpreter'
const live = []
const figures = { startMs: [] }
let src
let snapshotId
try {
  src = await Sandbox.create(template, { timeoutMs: 600_000 })
  live.push(src)
  assert.equal((await src.runCode('x = 42')).error, undefined)
  await src.files.write(PATH, CONTENT)
  let began = Date.now()
  snapshotId = (await src.createSnapshot()).snapshotId
  figures.snapshotMs = Date.now() - began
  const seen = new Set([src.sandboxId])
  const copies = []
  for (let i = 0; i < 3; i++) {
    began = Date.now()
    copies.push(await Sandbox.create(snapshotId, { timeoutMs: 600_000 }))
    figures.startMs.push(Date.now() - began)
    live.push(copies[i])
    await checkCopy(copies[i], seen)
  }
  await checkIndependent(copies, src)
  for (const sbx of copies) await sbx.kill()
  began = Date.now()
  const forks = await src.fork({ count: 5, timeoutMs: 600_000 })
  figures.fork5Ms = Date.now() - began
  live.push(...forks.filter((f) => !(f instanceof Error)))
  const failed = forks.filter((f) => f instanceof Error).map(String)
  assert.ok(forks.length === 5 && failed.length === 0, `${forks.length} forks, failed: ${failed}`)
  for (const f of forks) await checkCopy(f, seen)
  await checkIndependent(forks, src)
} finally {
  for (const sbx of live) await sbx.kill()
  if (snapshotId !== undefined) await Sandbox.deleteSnapshot(snapshotId)
}
console.log(JSON.stringify({ ok: true, sandboxID: src.sandboxId, snapshotID: snapshotId, ...figures }))
