// The official E2B SDK, unchanged, against Cubby. Configured only by
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
import { Sandbox } from 'e2b'

const sbx = await Sandbox.create({ metadata: { example: 'quickstart' }, timeoutMs: 120_000 })
console.log(`sandbox ${sbx.sandboxId} created`)
try {
  await sbx.files.write('data/numbers.txt', [3, 1, 4, 1, 5, 9, 2, 6].join('\n'))
  const run = await sbx.commands.run(
    `python3 -c "import statistics as s; xs=[int(l) for l in open('data/numbers.txt')]; print('mean', s.mean(xs), 'max', max(xs))"`,
    { onStdout: (line) => process.stdout.write(`  stdout: ${line}`) },
  )
  console.log(`exit code ${run.exitCode}`)
  const entries = await sbx.files.list('data')
  console.log('files:', entries.map((e) => `${e.path} (${e.size} bytes)`).join(', '))
  const who = await sbx.commands.run('whoami && uname -sr && sudo -n true && echo sudo ok')
  console.log(who.stdout.trim().split('\n').map((l) => `  ${l}`).join('\n'))
  const listed = await Sandbox.list({ query: { metadata: { example: 'quickstart' } } }).nextItems()
  console.log(`listed ${listed.length} sandbox(es) with metadata example=quickstart`)
} finally {
  await sbx.kill()
  console.log('sandbox killed')
}
