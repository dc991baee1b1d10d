// The official E2B code-interpreter SDK, unchanged, against Cubby: the flow of
// E2B's docs. Configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
// Sandbox.create() with no template uses the SDK's default,
// code-interpreter-v1 (Cubby's built-in code-interpreter template).
import { writeFileSync } from 'node:fs'
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create({ metadata: { example: 'quickstart' }, timeoutMs: 120_000 })
console.log(`sandbox ${sbx.sandboxId} created`)
try {
  const stats = await sbx.runCode('import statistics as s\nxs = [3, 1, 4, 1, 5, 9, 2, 6]\nf"mean {s.mean(xs)}, max {max(xs)}"')
  console.log(`python: ${stats.text}`)

  const chart = await sbx.runCode(`
import matplotlib.pyplot as plt
plt.plot([1, 2, 3, 4], [1, 4, 9, 16], label='squares')
plt.title('Squares')
plt.legend()
plt.show()`)
  const png = chart.results.find((r) => r.png)
  if (!png) throw new Error(`no chart: ${JSON.stringify(chart.error ?? chart.results)}`)
  writeFileSync('quickstart-chart.png', Buffer.from(png.png, 'base64'))
  console.log(`chart: ${png.chart?.type} chart "${png.chart?.title}" saved to quickstart-chart.png`)

  const js = await sbx.runCode("const os = require('os'); `node ${process.version} on ${os.platform()}`", { language: 'js' })
  console.log(`javascript: ${js.text}`)

  await sbx.files.write('data/numbers.txt', [3, 1, 4, 1, 5, 9, 2, 6].join('\n'))
  const run = await sbx.commands.run('wc -l data/numbers.txt && whoami')
  console.log(`command: ${run.stdout.trim().replace(/\n/g, ', ')} (exit code ${run.exitCode})`)
  const listed = await Sandbox.list({ query: { metadata: { example: 'quickstart' } } }).nextItems()
  console.log(`listed ${listed.length} sandbox(es) with metadata example=quickstart`)
} finally {
  await sbx.kill()
  console.log('sandbox killed')
}
