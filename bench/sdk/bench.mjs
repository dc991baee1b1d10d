// Cubby's benchmark driver (GitHub issue 6 item 4, and the bench lines of issues 3
// and 5). It measures Cubby servers through the official E2B JS SDKs (what a user
// sees) and looks inside from the host where it must (bench/cmd/benchmem: memory
// cgroups and smaps_rollup), then prints one table on stdout: median (p50), p99
// (nearest rank: with fewer than 100 samples it is the largest), sample count and
// a note. Progress goes to stderr. bench/run.sh starts the servers and sets:
//   E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY  the runc server (every section)
//   CUBBY_BENCH_RUNSC_URL                      the gVisor server ('' = runsc rows missing)
//   CUBBY_BENCH_MEM                            path of the benchmem helper
// Sizes (env, defaults in brackets) are listed in SIZES below; BENCH_OUT=<file>
// also writes every figure as JSON.
import { Sandbox } from '@e2b/code-interpreter'
import { execFile } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { promisify } from 'node:util'

const SIZES = {
  BENCH_POOL_SIZE: 20, // warm pool of the pool server (bench/run.sh passes it to --pool)
  BENCH_CREATES: 20, // serial create → first runCode cycles (cold, and from the pool)
  BENCH_CONCURRENCY: 20, // concurrent clients, each one create → first runCode
  BENCH_CONC_ROUNDS: 1, // cycles per concurrent client
  BENCH_RTT_ROUNDS: 10, // runCode vs raw kernel: interleaved rounds …
  BENCH_RTT_PER_ROUND: 20, // … of this many executions each, per path
  BENCH_STDOUT_MB: 10, // MiB printed by one runCode
  BENCH_STDOUT_REPS: 3,
  BENCH_RUNS: 100, // commands.run('true') round trips
  BENCH_FILE_MB: 64, // upload/download size (MiB) …
  BENCH_FILE_REPS: 3, // … and repetitions
  BENCH_CK_N: 30, // create+kill cycles for the throughput figure …
  BENCH_CK_CONCURRENCY: 4, // … run by this many clients
  BENCH_MEM_MAX: 100, // density: grow to N = 10, 50, then this
  BENCH_MEM_CONCURRENCY: 4, // concurrent creates while growing
  BENCH_MEM_TIME_S: 240, // stop growing after this long …
  BENCH_MEM_RESERVE_MIB: 6144, // … or before host MemAvailable would drop below this
  BENCH_MEM_SETTLE_S: 5, // idle wait before reading memory
  BENCH_MEM_BUDGET_MIB: 0, // budget for the largest-N figure (0 = MemTotal − 2 GiB)
  BENCH_RT_CREATES: 10, // per runtime: serial creates (base template)
  BENCH_RT_IDLE_N: 5, // per runtime: idle code-interpreter sandboxes measured
  BENCH_PAUSE_CYCLES: 20, // per runtime: pause → connect → runCode cycles
  BENCH_PYONLY_N: 10, // idle sandboxes on the pyonly server (--default-contexts python)
  BENCH_LEAN_N: 100, // idle sandboxes on the lean server (… --python-preload "")
}
const size = Object.fromEntries(Object.entries(SIZES).map(([k, d]) => [k, Number(process.env[k] ?? d)]))

const MiB = 1 << 20
const apiKey = process.env.E2B_API_KEY
const servers = { runc: { apiUrl: process.env.E2B_API_URL, sandboxUrl: process.env.E2B_SANDBOX_URL } }
if (process.env.CUBBY_BENCH_RUNSC_URL) {
  servers.runsc = { apiUrl: process.env.CUBBY_BENCH_RUNSC_URL, sandboxUrl: process.env.CUBBY_BENCH_RUNSC_URL }
}
// Variants of the runc server with other agent boot flags (bench/run.sh).
const VARIANTS = {
  pyonly: { env: 'CUBBY_BENCH_PYONLY_URL', flags: '--default-contexts python', n: 'BENCH_PYONLY_N' },
  lean: { env: 'CUBBY_BENCH_LEAN_URL', flags: '--default-contexts python --python-preload ""', n: 'BENCH_LEAN_N' },
}
for (const [name, v] of Object.entries(VARIANTS)) {
  if (process.env[v.env]) servers[name] = { apiUrl: process.env[v.env], sandboxUrl: process.env[v.env] }
}
if (process.env.CUBBY_BENCH_POOL_URL) {
  servers.pool = { apiUrl: process.env.CUBBY_BENCH_POOL_URL, sandboxUrl: process.env.CUBBY_BENCH_POOL_URL }
}
const memHelper = process.env.CUBBY_BENCH_MEM
const rawKernel = readFileSync(new URL('./rawkernel.py', import.meta.url), 'utf8')
const CI = 'code-interpreter'
const LONG = { requestTimeoutMs: 300_000 }

const now = () => performance.now()
const log = (...a) => console.error(`[bench ${((now() / 1000) | 0).toString().padStart(4)}s]`, ...a)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.max(0, Math.ceil(q * s.length) - 1)]
}
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length
const ms = (v) => (v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`)
const mib = (v) => `${(v / MiB).toFixed(1)} MiB`

// Every figure: the table row and the JSON record.
const rows = []
const figures = {}
function stat(key, name, xs, unit = ms, note = '') {
  figures[key] = { p50: quantile(xs, 0.5), p99: quantile(xs, 0.99), mean: mean(xs), n: xs.length, samples: xs }
  rows.push([name, unit(quantile(xs, 0.5)), unit(quantile(xs, 0.99)), String(xs.length), note])
}
function value(key, name, v, text, note = '') {
  figures[key] = { value: v }
  rows.push([name, text, '', '', note])
}
function missing(key, name, why) {
  figures[key] = { missing: why }
  rows.push([name, 'missing', '', '', why])
}

// section runs fn; a failure is reported as a missing row instead of ending the run.
// BENCH_SECTIONS=key,key runs only those sections (e.g. warmPool,coldSerial).
const only = process.env.BENCH_SECTIONS ? new Set(process.env.BENCH_SECTIONS.split(',')) : null
async function section(key, name, fn) {
  if (only && !only.has(key)) return
  log(`${name} …`)
  try {
    await fn()
  } catch (err) {
    log(`${name} failed:`, err)
    missing(key, name, oneLine(err))
  }
}
const oneLine = (err) => String(err?.message ?? err).split('\n')[0].slice(0, 160)

// Sandboxes still alive, killed on exit whatever happens.
const live = new Map()
async function create(rt, template, opts = {}) {
  const sbx = await Sandbox.create(template, { ...servers[rt], apiKey, timeoutMs: 900_000, ...LONG, ...opts })
  live.set(sbx.sandboxId, sbx)
  return sbx
}
async function kill(sbx) {
  live.delete(sbx.sandboxId)
  await sbx.kill()
}
async function killAll(list, concurrency = 8) {
  await pool(list, concurrency, (s) => kill(s).catch((e) => log('kill', s.sandboxId, oneLine(e))))
}
// pool runs fn over items with at most `concurrency` in flight; results in order.
async function pool(items, concurrency, fn) {
  const out = new Array(items.length)
  let next = 0
  const worker = async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await fn(items[i], i)
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker))
  return out
}
const range = (n) => Array.from({ length: n }, (_, i) => i)

async function runCodeOk(sbx, code, opts = {}) {
  const ex = await sbx.runCode(code, { timeoutMs: 300_000, ...LONG, ...opts })
  if (ex.error) throw new Error(`runCode(${JSON.stringify(code.slice(0, 40))}): ${ex.error.name}: ${ex.error.value}`)
  return ex
}

// coldCycle: create a code-interpreter sandbox, wait for its first runCode result, kill it.
// With keep, the sandbox is returned instead of killed.
async function coldCycle(rt = 'runc', keep = false) {
  const t0 = now()
  const sbx = await create(rt, CI)
  const t1 = now()
  const ex = await runCodeOk(sbx, '1 + 1')
  const t2 = now()
  if (ex.text !== '2') throw new Error(`first runCode returned ${JSON.stringify(ex.text)}, want "2"`)
  if (!keep) await kill(sbx)
  return { create: t1 - t0, first: t2 - t1, total: t2 - t0, sbx }
}

// poolReady sums cubby_pool_sandboxes{state="ready"} on the pool server's /metrics.
async function poolReady() {
  const text = await (await fetch(`${servers.pool.apiUrl}/metrics`)).text()
  return text.split('\n').filter((l) => l.startsWith('cubby_pool_sandboxes{state="ready"'))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0)
}
async function waitPoolFull() {
  const t0 = now()
  let n = 0
  while ((n = await poolReady()) < size.BENCH_POOL_SIZE) {
    if (now() - t0 > 600_000) throw new Error(`warm pool holds ${n} of ${size.BENCH_POOL_SIZE} after 10 min`)
    await sleep(250)
  }
  log(`warm pool full (${n}) after ${ms(now() - t0)}`)
}
async function poolHits() {
  const text = await (await fetch(`${servers.pool.apiUrl}/metrics`)).text()
  return text.split('\n').filter((l) => l.startsWith('cubby_pool_claims_total{outcome="hit"'))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0)
}

// warmPool: create → first result through the warm pool, serially (the pool
// refills behind the claims, as it does in production) and then, with the pool
// full again, from BENCH_CONCURRENCY clients at once. The pool server is then
// stopped so its refills do not load the later sections.
async function warmPool() {
  await waitPoolFull()
  await coldCycle('pool') // unmeasured: the client's first connection and JIT warm-up
  await waitPoolFull()
  const hits0 = await poolHits()
  const serial = []
  for (let i = 0; i < size.BENCH_CREATES; i++) serial.push(await coldCycle('pool'))
  const hits1 = await poolHits()
  stat('poolSerial', 'warm pool create → first runCode result, serial', serial.map((r) => r.total), ms,
    `pool of ${size.BENCH_POOL_SIZE}; ${hits1 - hits0}/${serial.length} served warm`)
  stat('poolSerialCreate', '  of which Sandbox.create returns', serial.map((r) => r.create))
  stat('poolSerialFirst', '  then first runCode', serial.map((r) => r.first))
  await waitPoolFull()
  await sleep(2000) // let the last boot's kernels settle
  const n = size.BENCH_CONCURRENCY
  const t0 = now()
  const conc = await pool(range(n), n, () => coldCycle('pool', true))
  const wall = now() - t0
  // Baseline: the same clients run one more cell at once on their (now warm)
  // sandboxes, which is what 20 concurrent first results cost without any create.
  const again = await pool(conc, n, async (r) => {
    const t = now()
    await runCodeOk(r.sbx, '1 + 1')
    return now() - t
  })
  await killAll(conc.map((r) => r.sbx)) // after the clock: kills would load the other clients
  const hits2 = await poolHits()
  stat('poolConcurrent', `warm pool create → first runCode result, ${n} concurrent`, conc.map((r) => r.total), ms,
    `wall ${ms(wall)}; ${hits2 - hits1}/${n} served warm`)
  stat('poolConcurrentCreate', '  of which Sandbox.create returns', conc.map((r) => r.create))
  stat('concurrentRunCode', `  baseline: ${n} concurrent runCode, no create`, again, ms, 'the same sandboxes, second cell')
}

async function coldSerial() {
  const res = []
  for (let i = 0; i < size.BENCH_CREATES; i++) res.push(await coldCycle())
  stat('coldSerial', 'cold create → first runCode result, serial', res.map((r) => r.total), ms, 'code-interpreter template, no pool')
  stat('coldSerialCreate', '  of which Sandbox.create returns', res.map((r) => r.create))
  stat('firstRunCode', 'first runCode after create returned', res.map((r) => r.first), ms, "runCode('1 + 1'), default Python context")
}

async function coldConcurrent() {
  const n = size.BENCH_CONCURRENCY
  const t0 = now()
  const res = (await pool(range(n), n, async () => {
    const out = []
    for (let r = 0; r < size.BENCH_CONC_ROUNDS; r++) out.push(await coldCycle())
    return out
  })).flat()
  const wall = now() - t0
  stat('coldConcurrent', `cold create → first runCode result, ${n} concurrent`, res.map((r) => r.total), ms,
    `wall ${ms(wall)} for ${res.length} cycles`)
}

// roundTrips measures runCode('x += 1; x') through the SDK, gateway, agent and kernel,
// and the same code sent straight to the same kernel from inside the sandbox
// (rawkernel.py), interleaved round by round so both see the same machine load.
async function roundTrips(sbx) {
  await runCodeOk(sbx, 'x = 0')
  const cf = (await runCodeOk(sbx, 'from ipykernel.connect import get_connection_file\nprint(get_connection_file())'))
    .logs.stdout.join('').trim()
  await sbx.files.write('/tmp/cubby-bench-rawkernel.py', rawKernel)
  let expect = 0
  for (let i = 0; i < 5; i++) {
    await runCodeOk(sbx, 'x += 1; x') // warm-up
    expect++
  }
  const full = [], raw = []
  const k = size.BENCH_RTT_PER_ROUND
  for (let r = 0; r < size.BENCH_RTT_ROUNDS; r++) {
    for (let i = 0; i < k; i++) {
      const t0 = now()
      const ex = await runCodeOk(sbx, 'x += 1; x')
      full.push(now() - t0)
      if (ex.text !== String(++expect)) throw new Error(`runCode returned x=${ex.text}, want ${expect}`)
    }
    const out = await sbx.commands.run(`python3 /tmp/cubby-bench-rawkernel.py '${cf}' ${k} 'x += 1; x'`, { timeoutMs: 120_000 })
    const got = JSON.parse(out.stdout)
    expect += k
    if (got.results.at(-1) !== String(expect)) throw new Error(`raw kernel saw x=${got.results.at(-1)}, want ${expect}`)
    raw.push(...got.ms)
  }
  stat('runCodeRtt', "runCode('x += 1; x') full stack", full, ms, 'SDK → gateway → agent → kernel')
  stat('rawKernelRtt', '  same kernel, raw ZeroMQ round trip', raw, ms, 'rawkernel.py inside the sandbox, same run')
  const r50 = quantile(full, 0.5) / quantile(raw, 0.5)
  const r99 = quantile(full, 0.99) / quantile(raw, 0.99)
  figures.rttRatio = { p50: r50, p99: r99 }
  rows.push(['  ratio full stack / raw kernel', `${r50.toFixed(2)}×`, `${r99.toFixed(2)}×`, '', 'target ≤ 1.15× (issue 6)'])
}

async function bigStdout(sbx) {
  const want = size.BENCH_STDOUT_MB * MiB
  const lines = want / 1024
  const code = `import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(${lines}):\n    sys.stdout.write(line)\n`
  const times = []
  for (let i = 0; i < size.BENCH_STDOUT_REPS; i++) {
    let got = 0
    const t0 = now()
    await runCodeOk(sbx, code, { onStdout: (m) => { got += m.line.length } })
    times.push(now() - t0)
    if (got !== want) throw new Error(`received ${got} bytes of stdout, want ${want}`)
  }
  stat('stdout10MB', `${size.BENCH_STDOUT_MB} MiB stdout through runCode`, times, ms,
    `${(size.BENCH_STDOUT_MB / (quantile(times, 0.5) / 1000)).toFixed(1)} MiB/s at p50, streamed via onStdout`)
}

async function commandsAndFiles(sbx) {
  for (let i = 0; i < 5; i++) await sbx.commands.run('true')
  const runs = []
  for (let i = 0; i < size.BENCH_RUNS; i++) {
    const t0 = now()
    await sbx.commands.run('true')
    runs.push(now() - t0)
  }
  stat('commandsRun', "commands.run('true') round trip", runs)

  const mb = size.BENCH_FILE_MB
  const data = new Uint8Array(mb * MiB)
  for (let i = 0; i < data.length; i += 4096) data[i] = i & 0xff
  const up = [], down = []
  for (let i = 0; i < size.BENCH_FILE_REPS; i++) {
    let t0 = now()
    await sbx.files.write('/tmp/cubby-bench.bin', data.buffer)
    up.push(mb / ((now() - t0) / 1000))
    t0 = now()
    const got = await sbx.files.read('/tmp/cubby-bench.bin', { format: 'bytes' })
    down.push(mb / ((now() - t0) / 1000))
    if (got.length !== data.length) throw new Error(`read ${got.length} bytes, wrote ${data.length}`)
  }
  const mbps = (v) => `${v.toFixed(0)} MiB/s`
  stat('upload', `upload ${mb} MiB (files.write)`, up, mbps, 'p99 column = slowest')
  stat('download', `download ${mb} MiB (files.read)`, down, mbps, 'p99 column = slowest')
}

async function oneSandbox() {
  const sbx = await create('runc', CI)
  try {
    await runCodeOk(sbx, '1')
    await section('rtt', "runCode('x += 1; x') vs raw kernel", () => roundTrips(sbx))
    await section('stdout10MB', `${size.BENCH_STDOUT_MB} MiB stdout through runCode`, () => bigStdout(sbx))
    await section('commandsFiles', 'commands.run and files', () => commandsAndFiles(sbx))
  } finally {
    await kill(sbx)
  }
}

async function createKillThroughput() {
  const n = size.BENCH_CK_N
  const t0 = now()
  const cycles = await pool(range(n), size.BENCH_CK_CONCURRENCY, async () => {
    const c0 = now()
    await kill(await create('runc', 'base'))
    return now() - c0
  })
  const perSec = n / ((now() - t0) / 1000)
  stat('createKillCycle', 'create + kill cycle (base template)', cycles, ms, `${size.BENCH_CK_CONCURRENCY} clients`)
  value('createKillPerSec', 'create + kill throughput', perSec, `${perSec.toFixed(2)} /s`,
    `${n} cycles, ${size.BENCH_CK_CONCURRENCY} concurrent clients`)
}

// --- memory -------------------------------------------------------------------

function hostMem() {
  const m = readFileSync('/proc/meminfo', 'utf8')
  const kb = (k) => Number(m.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm'))[1]) * 1024
  return { total: kb('MemTotal'), available: kb('MemAvailable') }
}

async function measureMemory(ids) {
  if (!memHelper) throw new Error('CUBBY_BENCH_MEM (the benchmem helper) is not set')
  const { stdout } = await promisify(execFile)(memHelper, ids, { maxBuffer: 64 * MiB })
  const out = JSON.parse(stdout)
  const bad = Object.entries(out.sandboxes).filter(([, s]) => s.error)
  if (bad.length) throw new Error(`benchmem: ${bad[0][0]}: ${bad[0][1].error}`)
  return Object.values(out.sandboxes)
}

// memRows adds the per-sandbox memcg and PSS rows for one measurement and returns
// the per-sandbox means.
function memRows(key, label, sandboxes, extra = '') {
  const usage = sandboxes.map((s) => s.memcg.usageBytes)
  const pss = sandboxes.map((s) => s.procs.pssBytes)
  const anon = sandboxes.map((s) => s.memcg.anonBytes)
  stat(`${key}Memcg`, `${label}: memcg usage / sandbox`, usage, mib,
    `anon p50 ${mib(quantile(anon, 0.5))}${extra}`)
  stat(`${key}Pss`, `${label}: PSS / sandbox`, pss, mib,
    `${quantile(sandboxes.map((s) => s.procs.count), 0.5)} procs; p50 by name: ${byName(sandboxes)}`)
  return { memcg: mean(usage), pss: mean(pss) }
}

// byName lists the median PSS per process name over the sandboxes, largest first.
function byName(sandboxes) {
  const names = [...new Set(sandboxes.flatMap((s) => Object.keys(s.procs.pssByName ?? {})))]
  return names
    .map((n) => [n, quantile(sandboxes.map((s) => s.procs.pssByName?.[n] ?? 0), 0.5)])
    .sort((a, b) => b[1] - a[1])
    .slice(0, 4)
    .map(([n, v]) => `${n} ${(v / MiB).toFixed(0)}`)
    .join(', ') + ' MiB'
}

async function density() {
  const targets = [10, 50, size.BENCH_MEM_MAX].filter((n, i, a) => n <= size.BENCH_MEM_MAX && a.indexOf(n) === i)
  const sbxs = []
  const start = now()
  const base = hostMem()
  let perSandbox = 400 * MiB // estimate until the first measurement
  let stopped = ''
  let last = null
  try {
    for (const target of targets) {
      let inflight = 0
      await pool(range(target - sbxs.length), size.BENCH_MEM_CONCURRENCY, async () => {
        if (stopped) return
        if ((now() - start) / 1000 > size.BENCH_MEM_TIME_S) {
          stopped = `time limit ${size.BENCH_MEM_TIME_S} s reached`
          return
        }
        if (hostMem().available - (inflight + 1) * perSandbox < size.BENCH_MEM_RESERVE_MIB * MiB) {
          stopped = `host MemAvailable would fall below ${size.BENCH_MEM_RESERVE_MIB} MiB`
          return
        }
        inflight++
        try {
          const sbx = await create('runc', CI)
          sbxs.push(sbx)
          await runCodeOk(sbx, '1') // the default Python context's kernel is live
        } finally {
          inflight--
        }
      })
      const n = sbxs.length
      if (n === 0) break
      if (last && n === last.n) break
      await sleep(size.BENCH_MEM_SETTLE_S * 1000)
      const m = await measureMemory(sbxs.map((s) => s.sandboxId))
      const drop = (base.available - hostMem().available) / n
      const means = memRows(`idle${n}`, `idle, N=${n} live`, m, `; host MemAvailable drop ${mib(drop)}/sandbox`)
      perSandbox = Math.max(means.memcg, means.pss)
      last = { n, perSandbox, elapsed: now() - start }
      log(`density N=${n}: ${mib(means.memcg)} memcg, ${mib(means.pss)} PSS per sandbox`)
      if (n < target) {
        stopped ||= 'creates failed'
        break
      }
    }
  } finally {
    const reached = sbxs.length
    await killAll(sbxs)
    if (stopped) {
      value('densityStopped', `density stopped early at N=${reached}`, reached, String(reached), stopped)
    }
  }
  if (!last) throw new Error(stopped || 'no sandbox measured')
  const budget = densityBudget()
  const fit = Math.floor(budget / last.perSandbox)
  value('densityFit', `largest N in ${(budget / 1024 / MiB).toFixed(1)} GiB (computed)`, fit, String(fit),
    `budget ÷ max(mean memcg, mean PSS) at N=${last.n} = ${mib(last.perSandbox)}`)
}

// --- per runtime --------------------------------------------------------------

async function runtimeCreates() {
  const rts = ['runc', 'runsc'].filter((rt) => servers[rt])
  const t = Object.fromEntries(rts.map((rt) => [rt, []]))
  for (let i = 0; i < size.BENCH_RT_CREATES; i++) {
    for (const rt of rts) {
      const t0 = now()
      const sbx = await create(rt, 'base')
      t[rt].push(now() - t0)
      await sbx.commands.run('true')
      await kill(sbx)
    }
  }
  for (const rt of rts) stat(`create_${rt}`, `[${rt}] create (base template)`, t[rt], ms, 'Sandbox.create returns, interleaved')
}

async function runtimeIdle(rt, { n = size.BENCH_RT_IDLE_N, pause = true, note = '' } = {}) {
  const sbxs = []
  try {
    const cycles = await pool(range(n), 2, async () => {
      const t0 = now()
      const sbx = await create(rt, CI)
      sbxs.push(sbx)
      const t1 = now()
      await runCodeOk(sbx, '1')
      return { create: t1 - t0, total: now() - t0 }
    })
    stat(`ciCreate_${rt}`, `[${rt}] create → first runCode result`, cycles.map((c) => c.total), ms,
      `code-interpreter, 2 concurrent; create alone p50 ${ms(quantile(cycles.map((c) => c.create), 0.5))}${note}`)
    await sleep(size.BENCH_MEM_SETTLE_S * 1000)
    const mem = memRows(`idle_${rt}`, `[${rt}] idle, N=${sbxs.length}`, await measureMemory(sbxs.map((s) => s.sandboxId)))
    if (pause) await section(`pause_${rt}`, `[${rt}] pause / resume`, () => pauseResume(rt, sbxs[0]))
    return mem
  } finally {
    await killAll(sbxs)
  }
}

// densityBudget is the memory (bytes) the largest-N figures divide:
// BENCH_MEM_BUDGET_MIB, else MemTotal − 2 GiB.
function densityBudget() {
  return size.BENCH_MEM_BUDGET_MIB ? size.BENCH_MEM_BUDGET_MIB * MiB : hostMem().total - 2048 * MiB
}

// variantIdle: the same idle measurement on a server started with other boot
// flags (VARIANTS), and the largest N that would fit in the density budget at
// that figure.
async function variantIdle(name) {
  const n = size[VARIANTS[name].n]
  const mem = await runtimeIdle(name, { n, pause: false, note: `; ${VARIANTS[name].flags}` })
  const per = Math.max(mem.memcg, mem.pss)
  const budget = densityBudget()
  value(`fit_${name}`, `[${name}] largest N in ${(budget / 1024 / MiB).toFixed(1)} GiB (computed)`, Math.floor(budget / per),
    String(Math.floor(budget / per)), `budget ÷ max(mean memcg, mean PSS) at N=${n} = ${mib(per)}`)
}

// pauseResume: POST /sandboxes/{id}/pause (sbx.pause), then resume through connect
// (Sandbox.connect), then a runCode that must still see the kernel's variables.
async function pauseResume(rt, sbx) {
  const token = `v${Date.now()}`
  await runCodeOk(sbx, `bench_token = '${token}'`)
  const pause = [], resume = [], first = []
  let mode = ''
  let lost = 0
  for (let i = 0; i < size.BENCH_PAUSE_CYCLES; i++) {
    const t0 = now()
    await sbx.pause()
    const t1 = now()
    if (i === 0) mode = await pauseMode(rt, sbx.sandboxId)
    const t2 = now()
    const again = await Sandbox.connect(sbx.sandboxId, { ...servers[rt], apiKey, timeoutMs: 900_000, ...LONG })
    const t3 = now()
    const ex = await again.runCode('bench_token', { timeoutMs: 120_000, ...LONG })
    const t4 = now()
    if (ex.error || ex.text?.replace(/^'|'$/g, '') !== token) lost++ // text/plain repr, quotes optional
    pause.push(t1 - t0)
    resume.push(t3 - t2)
    first.push(t4 - t3)
  }
  const note = `pauseMode ${mode || '?'}` + (lost ? `; kernel state LOST in ${lost} cycles` : '; kernel variables kept')
  stat(`pause_${rt}`, `[${rt}] pause (POST …/pause)`, pause, ms, note)
  stat(`resume_${rt}`, `[${rt}] resume (connect returns)`, resume)
  stat(`resumeFirst_${rt}`, `[${rt}]   then first runCode`, first)
}

async function pauseMode(rt, id) {
  const res = await fetch(`${servers[rt].apiUrl}/sandboxes/${id}`, { headers: { 'X-API-Key': apiKey } })
  return res.ok ? (await res.json()).pauseMode ?? '' : ''
}

// --- main ---------------------------------------------------------------------

async function main() {
  const t0 = now()
  if (servers.pool) {
    await section('warmPool', 'warm pool create → first runCode', warmPool)
    if (process.env.CUBBY_BENCH_POOL_PID) process.kill(Number(process.env.CUBBY_BENCH_POOL_PID), 'SIGTERM')
    delete servers.pool
  } else {
    missing('warmPool', 'warm pool create → first runCode', 'no pool server (bench/run.sh starts one)')
  }
  await section('coldSerial', 'cold create → first runCode, serial', coldSerial)
  await section('coldConcurrent', `cold create → first runCode, ${size.BENCH_CONCURRENCY} concurrent`, coldConcurrent)
  await section('oneSandbox', 'one code-interpreter sandbox', oneSandbox)
  await section('createKill', 'create + kill throughput', createKillThroughput)
  await section('density', 'idle memory per sandbox', density)
  await section('runtimeCreates', 'create latency per runtime', runtimeCreates)
  for (const rt of ['runc', 'runsc']) {
    if (!servers[rt]) {
      missing(`idle_${rt}`, `[${rt}] idle memory, pause / resume`, 'no runsc binary (make runsc)')
      continue
    }
    await section(`runtime_${rt}`, `[${rt}] idle memory and pause / resume`, () => runtimeIdle(rt))
  }
  for (const name of Object.keys(VARIANTS)) {
    if (servers[name]) await section(`idle_${name}`, `[${name}] idle memory, ${VARIANTS[name].flags}`, () => variantIdle(name))
  }
  figures.elapsedS = (now() - t0) / 1000
  print()
  if (process.env.BENCH_OUT) {
    writeFileSync(process.env.BENCH_OUT, JSON.stringify({ sizes: size, figures, rows }, null, 1))
  }
}

function print() {
  const head = ['measure', 'p50', 'p99', 'n', 'note']
  const w = head.map((_, c) => Math.max(...[head, ...rows].map((r) => r[c].length)))
  const line = (r) => r.map((v, c) => (c === 0 || c === 4 ? v.padEnd(w[c]) : v.padStart(w[c]))).join('  ').trimEnd()
  console.log(line(head))
  for (const r of rows) console.log(line(r))
  console.log(`(run took ${figures.elapsedS.toFixed(0)} s; p99 is the nearest-rank 99th percentile, the largest sample when n < 100)`)
}

let exiting = false
async function cleanup() {
  if (exiting) return
  exiting = true
  await killAll([...live.values()])
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => cleanup().finally(() => process.exit(130)))
}
try {
  await main()
} finally {
  await cleanup()
}
