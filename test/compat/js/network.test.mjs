// Egress control through the official SDK, unchanged: network.allowOut and
// denyOut by domain, wildcard and CIDR, rules injecting a secret with
// Secret.fill, and updateNetwork cutting a live connection. The hosts are
// the test internet run.sh starts (CUBBY_TEST_INTERNET: a JSON file with its
// names, addresses and CA); nothing leaves the machine.

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import { ALL_TRAFFIC, CommandExitError, Secret } from 'e2b'
import { CONCURRENCY, createSandbox, uniq } from './helpers.mjs'

if (!process.env.CUBBY_TEST_INTERNET) {
  throw new Error('CUBBY_TEST_INTERNET is not set: run the suite through test/compat/run.sh (it starts the test internet)')
}
const internet = JSON.parse(readFileSync(process.env.CUBBY_TEST_INTERNET, 'utf8'))
const testCA = readFileSync(internet.caFile, 'utf8')
const CA_PATH = '/tmp/test-internet-ca.pem'
/** Looks for a value in a sandbox's files, processes' env, argv and memory. */
const scanner = readFileSync(new URL('../scan.py', import.meta.url), 'utf8')

/** Creates a sandbox with network opts and the test CA file in it. */
async function sandboxWith(t, network) {
  const sbx = await createSandbox(t, { network })
  await sbx.files.write(CA_PATH, testCA)
  return sbx
}

/**
 * Runs curl in sbx; returns { code, status, body } (code 0 = an answer). TLS
 * is verified against the test CA, or with system set against the sandbox's
 * own trust store (where the egress CA is, for hosts with rules).
 */
async function curl(sbx, args, { system = false } = {}) {
  const ca = system ? '' : `--cacert ${CA_PATH}`
  const cmd = `curl -sS -m 10 ${ca} -w '\\n%{http_code}' ${args}`
  let out
  try {
    out = await sbx.commands.run(cmd, { user: 'root' })
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
    out = e
  }
  const lines = out.stdout.split('\n')
  return { code: out.exitCode, status: lines.pop(), body: lines.join('\n'), stderr: out.stderr }
}

/** The server field of an echo answer ('' when it is not one). */
function server(body) {
  try {
    return JSON.parse(body).server || ''
  } catch {
    return ''
  }
}

test('network', { concurrency: CONCURRENCY }, async (t) => {
  await t.test('allowOut by domain lets allowed.test through and refuses denied.test', async (t) => {
    const sbx = await sandboxWith(t, { allowOut: ['allowed.test'], denyOut: [ALL_TRAFFIC] })
    const ok = await curl(sbx, 'https://allowed.test/')
    assert.equal(ok.status, '200', ok.stderr)
    assert.equal(server(ok.body), internet.names['allowed.test'])
    for (const args of ['https://denied.test/', `--resolve denied.test:443:${internet.names['denied.test']} https://denied.test/`,
      `http://${internet.names['denied.test']}/`]) {
      const r = await curl(sbx, args)
      assert.equal(server(r.body), '', `${args} got through: ${r.body}`)
      assert.notEqual(r.status, '200', args)
    }
    const info = await sbx.getInfo()
    assert.deepEqual(info.network.allowOut, ['allowed.test'])
    assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC])
  })

  await t.test('a wildcard rule matches subdomains, not the apex', async (t) => {
    const sbx = await sandboxWith(t, { allowOut: ['*.wild.test'], denyOut: ({ allTraffic }) => [allTraffic] })
    for (const host of ['a.wild.test', 'x.y.wild.test']) {
      const r = await curl(sbx, `http://${host}/`)
      assert.equal(r.status, '200', `${host}: ${r.stderr}`)
    }
    const r = await curl(sbx, `--resolve wild.test:80:${internet.names['*.wild.test']} http://wild.test/`)
    assert.notEqual(r.status, '200', 'the apex of a wildcard got through')
  })

  await t.test('denyOut a CIDR', async (t) => {
    const sbx = await sandboxWith(t, { denyOut: [`${internet.names['denied.test']}/32`] })
    const denied = await curl(sbx, `http://${internet.names['denied.test']}/`)
    assert.equal(server(denied.body), '', 'a denied CIDR got through')
    const other = await curl(sbx, `http://${internet.names['allowed.test']}/`)
    assert.equal(other.status, '200', other.stderr)
  })

  await t.test('a rule with a secret header: the host gets it, the sandbox never holds it', async (t) => {
    const name = uniq('key')
    const value = `sk-${uniq('v')}-${uniq('w')}`
    await Secret.create(name, value)
    t.after(() => Secret.destroy(name).catch(() => {}))
    const sbx = await sandboxWith(t, {
      allowOut: ['echo.test'], denyOut: [ALL_TRAFFIC],
      rules: { 'echo.test': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }] },
    })
    const r = await curl(sbx, 'https://echo.test/', { system: true })
    assert.equal(r.status, '200', r.stderr)
    const echoed = JSON.parse(r.body)
    const want = createHash('sha256').update(`Bearer ${value}`).digest('hex')
    assert.equal(echoed.digests.Authorization, want, 'the host did not get the secret')
    assert.ok(!r.body.includes(value), 'the echoed secret reached the sandbox')
    const half = value.length >> 1
    await sbx.files.write('/tmp/scan.py', scanner)
    const scan = await sbx.commands.run(`python3 /tmp/scan.py '${value.slice(0, half)}' '${value.slice(half)}'`, { user: 'root' })
    assert.match(scan.stdout.trim(), /^clean \d+$/, `the secret is in the sandbox: ${scan.stdout}`)
    assert.ok(!JSON.stringify(await sbx.getInfo()).includes(value))
  })

  await t.test('updateNetwork cuts a live connection', async (t) => {
    const sbx = await sandboxWith(t, { allowOut: ['allowed.test'], denyOut: [ALL_TRAFFIC] })
    await sbx.commands.run(`curl -sN --cacert ${CA_PATH} 'https://allowed.test/stream?n=900&ms=100' > /tmp/stream.out 2>&1`,
      { background: true, user: 'root' })
    const lines = async () => Number((await sbx.commands.run('cat /tmp/stream.out 2>/dev/null | wc -l')).stdout.trim())
    const deadline = Date.now() + 10_000
    while ((await lines()) < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200))
    assert.ok((await lines()) >= 5, 'the stream did not start')
    await sbx.updateNetwork({ allowOut: ['other.test'], denyOut: [ALL_TRAFFIC] })
    await new Promise((r) => setTimeout(r, 1500))
    const cut = await lines()
    await new Promise((r) => setTimeout(r, 1500))
    assert.equal(await lines(), cut, 'the stream kept flowing after updateNetwork')
    const again = await curl(sbx, 'https://allowed.test/')
    assert.notEqual(again.status, '200', 'allowed.test still reachable')
    const now = await curl(sbx, 'https://other.test/')
    assert.equal(now.status, '200', now.stderr)
    assert.deepEqual((await sbx.getInfo()).network.allowOut, ['other.test'])
  })
})
