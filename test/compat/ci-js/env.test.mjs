// Environment variables with the official @e2b/code-interpreter SDK (docs/wire/code-interpreter.md
// §4.5): the sandbox env from create is visible in every language, a per-call
// `envs` overrides it for that call only, and afterwards the sandbox value is
// back and per-call-only variables are gone.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { CONCURRENCY, createSandbox, runOk } from './helpers.mjs'

const SANDBOX_ENVS = { CUBBY_SBX: 'from-create' }
const CALL_ENVS = { CUBBY_SBX: 'per-call', CUBBY_CALL: 'call only' }

// Per language: code printing "$CUBBY_SBX|$CUBBY_CALL" (empty when unset) on
// stdout, and code showing the variable to a child process.
const PROBES = {
  python: {
    show: 'import os\nprint(os.environ.get("CUBBY_SBX", "") + "|" + os.environ.get("CUBBY_CALL", ""))',
    child: 'import subprocess\nprint(subprocess.run(["sh", "-c", "echo \\"child $CUBBY_CALL\\""], capture_output=True, text=True).stdout, end="")',
  },
  javascript: {
    show: 'console.log((process.env.CUBBY_SBX ?? "") + "|" + (process.env.CUBBY_CALL ?? ""))',
  },
  r: {
    show: 'cat(Sys.getenv("CUBBY_SBX"), "|", Sys.getenv("CUBBY_CALL"), "\\n", sep = "")',
    child: 'cat(system("echo \\"child $CUBBY_CALL\\"", intern = TRUE), "\\n", sep = "")',
  },
  bash: {
    show: 'echo "${CUBBY_SBX:-}|${CUBBY_CALL:-}"',
    child: 'sh -c \'echo "child $CUBBY_CALL"\'',
  },
}

async function stdoutOf(sbx, code, opts) {
  return (await runOk(sbx, code, opts)).logs.stdout.join('')
}

describe('env vars', { concurrency: CONCURRENCY }, () => {
  for (const [language, probe] of Object.entries(PROBES)) {
    test(`${language}: sandbox env, per-call override, restored afterwards`, async (t) => {
      const sbx = await createSandbox(t, { envs: SANDBOX_ENVS })
      assert.equal(await stdoutOf(sbx, probe.show, { language }), 'from-create|\n', 'sandbox env from create')
      assert.equal(
        await stdoutOf(sbx, probe.show, { language, envs: CALL_ENVS }),
        'per-call|call only\n',
        'per-call envs override'
      )
      if (probe.child) {
        assert.equal(
          await stdoutOf(sbx, probe.child, { language, envs: CALL_ENVS }),
          'child call only\n',
          'child processes inherit per-call envs'
        )
      }
      assert.equal(await stdoutOf(sbx, probe.show, { language }), 'from-create|\n', 'restored after the call')
    })
  }

  test('python: a per-call env in a created context does not leak into the default one', async (t) => {
    const sbx = await createSandbox(t, { envs: SANDBOX_ENVS })
    const ctx = await sbx.createCodeContext()
    const probe = PROBES.python.show
    assert.equal(await stdoutOf(sbx, probe, { context: ctx, envs: CALL_ENVS }), 'per-call|call only\n')
    assert.equal(await stdoutOf(sbx, probe), 'from-create|\n')
    assert.equal(await stdoutOf(sbx, probe, { context: ctx }), 'from-create|\n')
  })
})
