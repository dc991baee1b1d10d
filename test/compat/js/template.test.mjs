// Template SDK compatibility: the official e2b Template class, unchanged,
// builds templates on Cubby (POST /v3/templates, file uploads, build steps,
// status polling with live logs), and Sandbox.create runs them.
//
// Needs the registries run.sh starts (internal/testenv/testregistry/cmd/testregistry):
// CUBBY_TEST_AUTH_IMAGE (a minimal Debian image behind a username and
// password, no sudo, no user "user"), and the server started with
// --registry-mirror pointing at the anonymous one (Docker Hub names).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { ApiClient, BuildError, ConnectionConfig, Sandbox, Template, waitForPort } from 'e2b'

const suffix = Math.random().toString(36).slice(2, 8)
const image = process.env.CUBBY_TEST_AUTH_IMAGE
const creds = { username: process.env.CUBBY_TEST_REGISTRY_USER, password: process.env.CUBBY_TEST_REGISTRY_PASSWORD }

// context makes a build context directory with a small app.
function context() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cubby-template-'))
  fs.mkdirSync(path.join(dir, 'app', 'lib'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'app', 'main.py'), 'print("app main")\n')
  fs.writeFileSync(path.join(dir, 'app', 'lib', 'util.py'), 'VALUE = 42\n')
  fs.writeFileSync(path.join(dir, 'config.json'), '{"mode": "secret"}\n')
  return dir
}

async function run(sbx, cmd, opts) {
  const r = await sbx.commands.run(cmd, opts)
  return r.stdout
}

async function deleteTemplate(templateID) {
  const client = new ApiClient(new ConnectionConfig())
  const res = await client.api.DELETE('/templates/{templateID}', { params: { path: { templateID } } })
  return res.response.status
}

test('fromImage with credentials: apt, copy, env, workdir, user, start and ready commands; exists, tags, delete', { timeout: 900_000 }, async () => {
  const name = `compat-image-${suffix}`
  const logs = []
  const t = Template({ fileContextPath: context() })
    .fromImage(image, creds)
    // Steps are cached by all before them: a step of this run's own keeps
    // another SDK set's run of this suite (same server) from caching these.
    .setEnvs({ COMPAT_RUN: suffix })
    .aptInstall(['python3', 'iproute2', 'curl'])
    .copy('app', '/app')
    .copy('config.json', '/etc/myapp/config.json', { mode: 0o600, user: 'root' })
    .setEnvs({ APP_MODE: 'compat' })
    .setWorkdir('/app')
    .setUser('user')
    .runCmd('echo "$APP_MODE $(whoami) $(pwd)" > built.txt')
    .setStartCmd('python3 -m http.server 8000', waitForPort(8000))
  const started = Date.now()
  const info = await Template.build(t, `${name}:v1`, { onBuildLogs: (e) => logs.push({ at: Date.now(), e }) })
  assert.equal(info.name, `${name}:v1`)
  // Logs arrive while the build runs (the SDK polls), from the server's steps.
  const apt = logs.find((l) => /Setting up python3/.test(l.e.message))
  assert.ok(apt, 'apt output in the build logs')
  assert.ok(apt.at < Date.now() - 500 || apt.at - started > 0, 'logs streamed during the build')
  assert.ok(logs.some((l) => /\[finalize\]/.test(l.e.message)))

  assert.equal(await Template.exists(name), true)
  assert.equal(await Template.exists(`nope-${suffix}`), false)

  const sbx = await Sandbox.create(`${name}:v1`)
  try {
    assert.equal(await run(sbx, 'cat built.txt'), 'compat user /app\n')
    assert.equal(await run(sbx, 'whoami; pwd; echo $APP_MODE'), 'user\n/app\ncompat\n')
    assert.equal(await run(sbx, 'cat /app/main.py /app/lib/util.py'), 'print("app main")\nVALUE = 42\n')
    assert.equal(await run(sbx, 'stat -c "%a %U" /etc/myapp/config.json', { user: 'root' }), '600 root\n')
    assert.equal(await run(sbx, 'sudo -n cat /etc/myapp/config.json'), '{"mode": "secret"}\n')
    assert.match(await run(sbx, 'curl -s localhost:8000/'), /main\.py/) // the start command serves /app
  } finally {
    await sbx.kill()
  }

  const tags = await Template.getTags(name)
  assert.deepEqual(tags.map((x) => x.tag), ['v1'])
  const assigned = await Template.assignTags(`${name}:v1`, 'prod')
  assert.equal(assigned.buildId, tags[0].buildId)
  const prod = await Sandbox.create(`${name}:prod`)
  assert.equal(await run(prod, 'cat /app/built.txt'), 'compat user /app\n')
  await prod.kill()
  await Template.removeTags(name, 'prod')
  assert.deepEqual((await Template.getTags(name)).map((x) => x.tag), ['v1'])

  assert.equal(await deleteTemplate(info.templateId), 204)
  assert.equal(await Template.exists(name), false)
  await assert.rejects(Sandbox.create(`${name}:v1`))
})

test('fromTemplate: pip from PyPI on base, npm from the npm registry on code-interpreter', { timeout: 900_000 }, async () => {
  const py = `compat-pip-${suffix}`
  await Template.build(Template().fromTemplate('base').pipInstall(['six==1.16.0']), py)
  const a = await Sandbox.create(py)
  assert.equal(await run(a, 'python3 -c "import six; print(six.__version__)"'), '1.16.0\n')
  await a.kill()

  const js = `compat-npm-${suffix}`
  await Template.build(Template().fromTemplate('code-interpreter').npmInstall(['is-odd@3.0.1'], { g: true }), js)
  const b = await Sandbox.create(js)
  assert.equal(await run(b, 'node -e "console.log(require(\'is-odd\')(3))"', { envs: { NODE_PATH: '/usr/local/lib/node_modules' } }), 'true\n')
  await b.kill()
  await deleteTemplate(py)
  await deleteTemplate(js)
})

test('Docker Hub names resolve (through the server\'s registry mirror)', { timeout: 900_000 }, async () => {
  const name = `compat-hub-${suffix}`
  await Template.build(Template().fromDebianImage('bookworm').runCmd('cat /etc/debian_version > /tmp/v'), name)
  const sbx = await Sandbox.create(name)
  assert.match(await run(sbx, 'cat /tmp/v'), /^12\./)
  await sbx.kill()
  await deleteTemplate(name)
})

test('a rebuild after changing the last step reuses every earlier step', { timeout: 900_000 }, async () => {
  const name = `compat-cache-${suffix}`
  const base = () =>
    Template().fromTemplate('base').setEnvs({ COMPAT_RUN: suffix }).runCmd('echo one > /tmp/one').runCmd('echo two > /tmp/two')
  await Template.build(base().runCmd('echo a > /tmp/last'), name)
  const logs = []
  await Template.build(base().runCmd('echo b > /tmp/last'), name, { onBuildLogs: (e) => logs.push(e.message) })
  assert.equal(logs.filter((m) => m.startsWith('CACHED RUN')).length, 2, logs.join('\n'))
  const sbx = await Sandbox.create(name)
  assert.equal(await run(sbx, 'cat /tmp/one /tmp/two /tmp/last'), 'one\ntwo\nb\n')
  await sbx.kill()
  await deleteTemplate(name)
})

test('a failing step fails the build with its exit code and output', { timeout: 600_000 }, async () => {
  const name = `compat-fail-${suffix}`
  await assert.rejects(
    Template.build(Template().fromTemplate('base').runCmd('echo about-to-fail; exit 7'), name),
    (err) => err instanceof BuildError && /exited with code 7/.test(err.message) && /about-to-fail/.test(err.message),
  )
  assert.equal(await Template.exists(name), false)
})
