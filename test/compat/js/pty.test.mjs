// sandbox.pty: Start with a PTY, SendInput(pty), Update (resize), SendSignal
// (docs/wire/envd.md §3.3).

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { CONCURRENCY, createSandbox, uniq, waitFor } from './helpers.mjs'

const enc = new TextEncoder()

/** Creates a PTY whose output is accumulated (decoded) into `out.text`. */
async function openPty(t, sbx, opts = {}) {
  const out = { text: '' }
  const dec = new TextDecoder()
  const handle = await sbx.pty.create({
    cols: 80,
    rows: 24,
    timeoutMs: 60_000,
    ...opts,
    onData: (d) => (out.text += dec.decode(d, { stream: true })),
  })
  t.after(() => sbx.pty.kill(handle.pid).catch(() => {}))
  return { handle, out }
}

describe('pty', { concurrency: CONCURRENCY }, () => {
  test('create, sendInput and read the terminal output', async (t) => {
    const sbx = await createSandbox(t)
    const { handle, out } = await openPty(t, sbx)
    assert.ok(Number.isInteger(handle.pid) && handle.pid > 0)

    await sbx.pty.sendInput(handle.pid, enc.encode('echo "A=$((40+2))" && tty\n'))
    await waitFor(`A=42 in ${JSON.stringify(out.text)}`, () => out.text.includes('A=42'))
    await waitFor(`/dev/pts in ${JSON.stringify(out.text)}`, () => out.text.includes('/dev/pts/'))

    // The PTY session gets the terminal env the SDK sends.
    await sbx.pty.sendInput(handle.pid, enc.encode('echo "T=[$TERM]" "W=$(whoami)"\n'))
    await waitFor(`TERM in ${JSON.stringify(out.text)}`, () =>
      out.text.includes('T=[xterm-256color] W=user')
    )
  })

  test('resize changes what tput cols and stty size report', async (t) => {
    const sbx = await createSandbox(t)
    const { handle, out } = await openPty(t, sbx, { cols: 80, rows: 24 })

    await sbx.pty.sendInput(handle.pid, enc.encode('echo "C1=$(tput cols)"\n'))
    await waitFor(`C1=80 in ${JSON.stringify(out.text)}`, () => out.text.includes('C1=80'))

    await sbx.pty.resize(handle.pid, { cols: 123, rows: 45 })
    await sbx.pty.sendInput(handle.pid, enc.encode('echo "C2=$(tput cols)" "S=$(stty size)"\n'))
    await waitFor(`C2=123 in ${JSON.stringify(out.text)}`, () =>
      out.text.includes('C2=123 S=45 123')
    )
  })

  test('exit ends the PTY with exit code 0', async (t) => {
    const sbx = await createSandbox(t)
    const { handle } = await openPty(t, sbx)
    await sbx.pty.sendInput(handle.pid, enc.encode('exit 0\n'))
    const r = await handle.wait()
    assert.equal(r.exitCode, 0)
  })

  test('kill returns true and ends the session; unknown pid gives false', async (t) => {
    const sbx = await createSandbox(t)
    const { handle, out } = await openPty(t, sbx)
    const marker = uniq('m')
    await sbx.pty.sendInput(handle.pid, enc.encode(`echo ${marker}-ready\n`))
    await waitFor('PTY ready', () => out.text.includes(`${marker}-ready`))

    assert.equal(await sbx.pty.kill(handle.pid), true)
    await assert.rejects(handle.wait())
    await waitFor('killed PTY to leave the process list', async () => {
      const procs = await sbx.commands.list()
      return !procs.some((p) => p.pid === handle.pid)
    })
    assert.equal(await sbx.pty.kill(999999), false)
  })

  test('a PTY can be reconnected by pid after disconnect', async (t) => {
    const sbx = await createSandbox(t)
    const { handle } = await openPty(t, sbx)
    await handle.disconnect()

    let text = ''
    const dec = new TextDecoder()
    const again = await sbx.pty.connect(handle.pid, {
      onData: (d) => (text += dec.decode(d, { stream: true })),
      timeoutMs: 60_000,
    })
    assert.equal(again.pid, handle.pid)
    await sbx.pty.sendInput(handle.pid, enc.encode('echo "R=$((6*7))"\n'))
    await waitFor(`R=42 in ${JSON.stringify(text)}`, () => text.includes('R=42'))
  })
})
