// Measures a Cubby server through the official E2B JS SDK (what users see) and
// prints medians: cold create-to-ready (no pool), create+kill cycle,
// commands.run('true') round trip, and file upload/download throughput.
// Configured by E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY; sizes by env:
// BENCH_CREATES (20), BENCH_RUNS (100), BENCH_FILE_MB (64), BENCH_FILE_REPS (5).
import { Sandbox } from 'e2b'

const creates = Number(process.env.BENCH_CREATES ?? 20)
const runs = Number(process.env.BENCH_RUNS ?? 100)
const fileMB = Number(process.env.BENCH_FILE_MB ?? 64)
const fileReps = Number(process.env.BENCH_FILE_REPS ?? 5)

const now = () => performance.now()
const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]
}
const fmt = (ms) => `${ms.toFixed(1)} ms`
const rows = []
const row = (name, xs, unit = fmt) => rows.push([name, unit(quantile(xs, 0.5)), unit(quantile(xs, 0.9)), String(xs.length)])

// Cold create-to-ready: Sandbox.create() returns once the agent is up and initialised;
// the first command proves it is usable.
const createMs = [], readyMs = [], cycleMs = []
for (let i = 0; i < creates; i++) {
  const t0 = now()
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  const t1 = now()
  await sbx.commands.run('true')
  const t2 = now()
  await sbx.kill()
  const t3 = now()
  createMs.push(t1 - t0)
  readyMs.push(t2 - t0)
  cycleMs.push(t1 - t0 + (t3 - t2))
}
row('create (Sandbox.create returns)', createMs)
row('create → first command done', readyMs)
row('create + kill cycle', cycleMs)

const sbx = await Sandbox.create({ timeoutMs: 300_000 })
try {
  const runMs = []
  for (let i = 0; i < 5; i++) await sbx.commands.run('true') // warm-up
  for (let i = 0; i < runs; i++) {
    const t0 = now()
    await sbx.commands.run('true')
    runMs.push(now() - t0)
  }
  row("commands.run('true') round trip", runMs)

  const data = new Uint8Array(fileMB << 20)
  for (let i = 0; i < data.length; i += 4096) data[i] = i & 0xff
  const up = [], down = []
  for (let i = 0; i < fileReps; i++) {
    let t0 = now()
    await sbx.files.write('bench.bin', data.buffer)
    up.push(fileMB / ((now() - t0) / 1000))
    t0 = now()
    const got = await sbx.files.read('bench.bin', { format: 'bytes' })
    down.push(fileMB / ((now() - t0) / 1000))
    if (got.length !== data.length) throw new Error(`read ${got.length} bytes, wrote ${data.length}`)
  }
  const mbps = (v) => `${v.toFixed(0)} MB/s`
  row(`upload ${fileMB} MiB (files.write)`, up, mbps)
  row(`download ${fileMB} MiB (files.read)`, down, mbps)
} finally {
  await sbx.kill()
}

const widths = [0, 1, 2, 3].map((c) => Math.max(...[['measure', 'median', 'p90', 'n'], ...rows].map((r) => r[c].length)))
const line = (r) => r.map((v, c) => (c === 0 ? v.padEnd(widths[c]) : v.padStart(widths[c]))).join('  ')
console.log(line(['measure', 'median', 'p90', 'n']))
for (const r of rows) console.log(line(r))
