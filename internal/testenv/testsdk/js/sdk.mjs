// One sandbox's life through the official SDK, unchanged, configured only by
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (a replica of a Cubby
// cluster): create, commands, files, runCode with a chart, kill. Prints one
// JSON line {"ok":true,...}; throws (exit code 1) on any mismatch.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const template = process.argv[2] ?? 'code-interpreter'
const began = Date.now()
const sbx = await Sandbox.create(template, { timeoutMs: 300_000 })
const created = Date.now() - began
try {
  const cmd = await sbx.commands.run('echo hi from $(hostname)')
  assert.equal(cmd.stdout.trim(), `hi from ${sbx.sandboxId}`)
  await sbx.files.write('/home/user/data.csv', 'x,y\n1,1\n2,4\n3,9\n')
  assert.match(await sbx.files.read('/home/user/data.csv'), /^x,y\n1,1/)
  const exec = await sbx.runCode(
    "import pandas as pd, matplotlib.pyplot as plt\n" +
    "df = pd.read_csv('/home/user/data.csv')\nplt.plot(df.x, df.y)\nplt.show()\nint(df.y.sum())")
  assert.equal(exec.error, undefined, JSON.stringify(exec.error))
  const chart = exec.results.find((r) => r.png)
  assert.ok(chart && Buffer.from(chart.png, 'base64').length > 1000, 'no PNG chart')
  assert.ok(exec.results.some((r) => r.text === '14'), JSON.stringify(exec.results.map((r) => r.text)))
} finally {
  await sbx.kill()
}
assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a killed sandbox is still known')
console.log(JSON.stringify({ ok: true, sandboxID: sbx.sandboxId, createMs: created }))
