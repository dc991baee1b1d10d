// sandbox.commands: the process.Process RPCs Start/Connect/List/SendInput/
// CloseStdin/SendSignal (docs/wire/envd.md §3.3).

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { CommandExitError, InvalidArgumentError, TimeoutError } from 'e2b'
import { CONCURRENCY, createSandbox, rejectsWith, uniq, waitFor } from './helpers.mjs'

/** A command that blocks until `flag` exists, then prints `marker`. */
function waitForFlagCmd(flag, marker) {
  return `while [ ! -e ${flag} ]; do sleep 0.05; done; echo ${marker}`
}

describe('commands', { concurrency: CONCURRENCY }, () => {
  test('run returns stdout, stderr and exit code 0', async (t) => {
    const sbx = await createSandbox(t)
    const r = await sbx.commands.run('echo out; echo err >&2; printf "no newline"')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\nno newline')
    assert.equal(r.stderr, 'err\n')
    assert.equal(r.error, undefined)

    const streamed = { out: '', err: '' }
    await sbx.commands.run('for i in 1 2 3; do echo line$i; echo e$i >&2; done', {
      onStdout: (d) => (streamed.out += d),
      onStderr: (d) => (streamed.err += d),
    })
    assert.equal(streamed.out, 'line1\nline2\nline3\n')
    assert.equal(streamed.err, 'e1\ne2\ne3\n')
  })

  test('large output arrives complete and in order', async (t) => {
    const sbx = await createSandbox(t)
    const r = await sbx.commands.run(
      `python3 -c "import sys; [sys.stdout.write('%06d\\n' % i) for i in range(50000)]"`
    )
    const lines = r.stdout.split('\n')
    assert.equal(lines.length, 50_001)
    assert.equal(lines[0], '000000')
    assert.equal(lines[49_999], '049999')
    assert.equal(r.stdout.length, 350_000)
  })

  test('non-zero exit raises CommandExitError with exitCode, stdout, stderr', async (t) => {
    const sbx = await createSandbox(t)
    const err = await rejectsWith(
      sbx.commands.run('echo partial; echo boom >&2; exit 3'),
      CommandExitError
    )
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'boom\n')
    assert.equal(err.error, 'exit status 3')

    const nf = await rejectsWith(sbx.commands.run('definitely-not-a-command-xyz'), CommandExitError)
    assert.equal(nf.exitCode, 127)
    assert.match(nf.stderr, /not found/)
  })

  test('environment: defaults, create envs, request envs win and do not leak', async (t) => {
    const sbx = await createSandbox(t, {
      envs: { CUBBY_A: 'create-a', CUBBY_B: 'create-b' },
    })
    const base = await sbx.commands.run('echo "$HOME|$USER|$(whoami)|$(pwd)"')
    assert.equal(base.stdout, '/home/user|user|user|/home/user\n')
    assert.match((await sbx.commands.run('echo $PATH')).stdout, /\/usr\/bin/)

    const r = await sbx.commands.run('echo "$CUBBY_A $CUBBY_B $CUBBY_REQ"', {
      envs: { CUBBY_A: 'request-a', CUBBY_REQ: 'req' },
    })
    assert.equal(r.stdout, 'request-a create-b req\n')

    const after = await sbx.commands.run('echo "[$CUBBY_A][$CUBBY_REQ]"')
    assert.equal(after.stdout, '[create-a][]\n', 'request-scoped envs leaked into the next command')
    const viaSudo = await sbx.commands.run('sudo bash -c \'echo "[$CUBBY_REQ]"\'')
    assert.equal(viaSudo.stdout, '[]\n')
  })

  test('cwd is honoured; a missing cwd is InvalidArgumentError', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    await sbx.files.makeDir('work/dir')
    assert.equal((await sbx.commands.run('pwd', { cwd: '/home/user/work/dir' })).stdout, '/home/user/work/dir\n')
    await rejectsWith(
      sbx.commands.run('pwd', { cwd: '/definitely/not/here' }),
      InvalidArgumentError,
      /does not exist/
    )
  })

  test('user root runs as root; sudo works for the default user', async (t) => {
    const sbx = await createSandbox(t)
    assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
    assert.equal((await sbx.commands.run('echo $HOME', { user: 'root' })).stdout, '/root\n')
    assert.equal((await sbx.commands.run('whoami', { user: 'user' })).stdout, 'user\n')
    assert.equal((await sbx.commands.run('sudo echo ok')).stdout, 'ok\n')
    assert.equal((await sbx.commands.run('sudo whoami')).stdout, 'root\n')
  })

  test('tools the SDK relies on are present (python3, python, git)', async (t) => {
    const sbx = await createSandbox(t)
    assert.match((await sbx.commands.run('python3 -c "print(6*7)"')).stdout, /^42\n$/)
    assert.match((await sbx.commands.run('python -c "print(6*7)"')).stdout, /^42\n$/)
    assert.match((await sbx.commands.run('git --version')).stdout, /^git version/)
  })

  test('background command with stdin: sendStdin and closeStdin, cat exits 0', async (t) => {
    const sbx = await createSandbox(t)
    let streamed = ''
    const h = await sbx.commands.run('cat', {
      background: true,
      stdin: true,
      onStdout: (d) => (streamed += d),
    })
    assert.ok(Number.isInteger(h.pid) && h.pid > 0)
    await sbx.commands.sendStdin(h.pid, 'hello\n')
    await waitFor('echoed stdin', () => streamed === 'hello\n')
    await h.sendStdin(new TextEncoder().encode('world\n'))
    await sbx.commands.sendStdin(h.pid, '')
    await sbx.commands.closeStdin(h.pid)
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello\nworld\n')

    // Without stdin:true, stdin is /dev/null: cat exits at once.
    const quick = await sbx.commands.run('cat; echo done')
    assert.equal(quick.stdout, 'done\n')
  })

  test('kill returns true and the process dies; unknown pid gives false', async (t) => {
    const sbx = await createSandbox(t)
    const h = await sbx.commands.run('sleep 120', { background: true })
    assert.equal(await sbx.commands.kill(h.pid), true)
    const err = await rejectsWith(h.wait(), CommandExitError)
    assert.equal(err.exitCode, -1)
    assert.match(err.error ?? '', /killed/)
    await rejectsWith(sbx.commands.run(`kill -0 ${h.pid}`), CommandExitError)

    assert.equal(await sbx.commands.kill(999999), false)

    const h2 = await sbx.commands.run('sleep 120', { background: true })
    assert.equal(await h2.kill(), true)
    await rejectsWith(h2.wait(), CommandExitError)
  })

  test('list shows running commands with pid, cmd, args, envs and cwd', async (t) => {
    const sbx = await createSandbox(t)
    const a = await sbx.commands.run('sleep 101', { background: true, envs: { CUBBY_L: '1' } })
    const b = await sbx.commands.run('sleep 102', { background: true, cwd: '/tmp' })
    t.after(async () => {
      await sbx.commands.kill(a.pid).catch(() => {})
      await sbx.commands.kill(b.pid).catch(() => {})
    })

    const procs = await sbx.commands.list()
    assert.ok(procs.length >= 2, `expected >= 2 processes, got ${procs.length}`)
    const pa = procs.find((p) => p.pid === a.pid)
    const pb = procs.find((p) => p.pid === b.pid)
    assert.ok(pa && pb, `started pids missing from ${JSON.stringify(procs)}`)
    assert.equal(pa.cmd, '/bin/bash')
    assert.deepEqual(pa.args, ['-l', '-c', 'sleep 101'])
    assert.equal(pa.envs.CUBBY_L, '1')
    assert.equal(pb.cwd, '/tmp')

    await sbx.commands.kill(a.pid)
    await rejectsWith(a.wait(), CommandExitError)
    const after = await sbx.commands.list()
    assert.ok(!after.some((p) => p.pid === a.pid), 'killed process still listed')
  })

  test('connect re-attaches to a running command by pid', async (t) => {
    const sbx = await createSandbox(t)
    const flag = `/tmp/${uniq('flag')}`
    const h = await sbx.commands.run(waitForFlagCmd(flag, 'connected-output'), {
      background: true,
    })
    let streamed = ''
    const c = await sbx.commands.connect(h.pid, { onStdout: (d) => (streamed += d) })
    assert.equal(c.pid, h.pid)
    await sbx.files.write(flag, '')
    const r = await c.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'connected-output\n')
    assert.equal(streamed, 'connected-output\n')
    await h.wait()
  })

  test('disconnect leaves the command running; it can be reconnected', async (t) => {
    const sbx = await createSandbox(t)
    const flag = `/tmp/${uniq('flag')}`
    const h = await sbx.commands.run(waitForFlagCmd(flag, 'still-alive'), { background: true })
    await h.disconnect()

    const procs = await sbx.commands.list()
    assert.ok(procs.some((p) => p.pid === h.pid), 'disconnect killed the process')
    await sbx.commands.run(`kill -0 ${h.pid}`)

    const c = await sbx.commands.connect(h.pid)
    await sbx.files.write(flag, '')
    const r = await c.wait()
    assert.equal(r.stdout, 'still-alive\n')
  })

  test('connect to an unknown pid fails', async (t) => {
    const sbx = await createSandbox(t)
    await assert.rejects(sbx.commands.connect(999999))
  })

  test('timeoutMs kills the command and surfaces TimeoutError', async (t) => {
    const sbx = await createSandbox(t)
    const marker = uniq('sleeper')
    await rejectsWith(
      sbx.commands.run(`exec -a ${marker} sleep 60`, { timeoutMs: 1_500 }),
      TimeoutError
    )
    // The server kills the process at the deadline, not only the client.
    await waitFor('timed-out process to be gone', async () => {
      const procs = await sbx.commands.list()
      return !procs.some((p) => p.args.some((a) => a.includes(marker)))
    })
    const ps = await sbx.commands.run(`ps -eo args | grep -c '^${marker}' || true`)
    assert.equal(ps.stdout.trim(), '0', 'timed-out process still alive in the sandbox')
  })

  test('background commands obey timeoutMs too', async (t) => {
    const sbx = await createSandbox(t)
    const h = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 1_500 })
    await rejectsWith(h.wait(), TimeoutError)
    await waitFor('background process to be killed at its deadline', async () => {
      const r = await sbx.commands.run(`kill -0 ${h.pid} 2>/dev/null && echo alive || echo gone`)
      return r.stdout.trim() === 'gone'
    })
  })
})
