"""The code interpreter as E2B's template runs it (official e2b-code-interpreter):

- the default python and javascript contexts exist the moment a sandbox is
  created and are listed first;
- kernels run as root (E2B runs Jupyter as root), contexts may use /root;
- ``javascript``/``js`` and ``typescript``/``ts`` run on Node.js (require,
  ESM import, packages in node_modules, npm install); Deno is ``deno``;
- ``java`` is a Java kernel with state, env vars (system properties), cwd
  and errors.
"""

import json
import uuid

import pytest
from e2b import TimeoutException
from e2b_code_interpreter import Sandbox

from helpers import HOME, run_ok


def test_default_contexts_exist_right_after_create_and_come_first(sandbox_factory):
    sbx = sandbox_factory()
    # No runCode before: the first request after create.
    mine = sbx.create_code_context(cwd="/tmp")
    listed = sbx.list_code_contexts()
    langs = [c.language for c in listed]
    assert langs[:2] == ["python", "javascript"], f"defaults not listed first: {langs}"
    assert [c.cwd for c in listed[:2]] == [HOME, HOME]
    assert listed[-1].id == mine.id, f"the context created meanwhile is listed after the defaults: {langs}"
    assert len(listed) == 3


def test_defaults_are_listed_by_a_fresh_client(sandbox_factory):
    sbx = sandbox_factory()
    other = Sandbox.connect(sbx.sandbox_id)
    assert [c.language for c in other.list_code_contexts()] == ["python", "javascript"]


def test_kernels_run_as_root(sandbox):
    ex = run_ok(sandbox, "import os\n(os.getuid(), os.getgid(), os.getcwd())")
    assert ex.text == f"(0, 0, '{HOME}')"
    root_ctx = sandbox.create_code_context(cwd="/root")
    assert root_ctx.cwd == "/root"
    assert run_ok(sandbox, "import os\nos.getcwd()", context=root_ctx).text == "/root"
    assert run_ok(sandbox, "open('/root/by-root.txt', 'w').write('x')", context=root_ctx).text == "1"
    js = run_ok(sandbox, "process.getuid()", language="javascript")
    assert js.text == "0"
    sh = run_ok(sandbox, "id -u", language="bash")
    assert sh.logs.stdout == ["0\n"]


def test_javascript_is_node(sandbox):
    ex = run_ok(sandbox, "const os = require('os'); [typeof os.cpus, process.release.name]", language="js")
    assert ex.text == "[ 'function', 'node' ]"
    assert run_ok(sandbox, "require('fs').readFileSync('/etc/hostname', 'utf8').length > 0", language="javascript").text == "true"
    assert run_ok(sandbox, "typeof Deno", language="javascript").text == "undefined"
    # ESM import and top-level await; the bindings outlive the cell.
    run_ok(sandbox, "import path from 'node:path'\nimport { promisify } from 'util'\nconst waited = await Promise.resolve(41)", language="js")
    assert run_ok(sandbox, "path.join('a', 'b') + (waited + 1) + typeof promisify", language="js").text == "a/b42function"
    err = sandbox.run_code("require('no-such-module-here')", language="javascript")
    assert err.error is not None and "no-such-module-here" in err.error.value
    # The last expression is displayed (util.inspect), console.log is stdout,
    # and a throw is the error's name, message and stack.
    shown = run_ok(sandbox, "console.log('side', 1);\n({ a: 1, b: [2] })", language="js")
    assert shown.text == "{ a: 1, b: [ 2 ] }"
    assert shown.logs.stdout == ["side 1\n"]
    thrown = sandbox.run_code("throw new TypeError('bad js')", language="js")
    assert thrown.error is not None and thrown.error.name == "TypeError", thrown.error
    assert thrown.error.value == "bad js"
    assert "TypeError: bad js" in thrown.error.traceback
    assert run_ok(sandbox, "waited", language="js").text == "41", "state survives an error"


def test_javascript_timeout_interrupts_and_kernel_death_recovers(sandbox):
    run_ok(sandbox, "var kept = await Promise.resolve(7)", language="js")  # loads the cell transform's compiler untimed
    with pytest.raises(TimeoutException, match="timed out"):
        sandbox.run_code("while (true) {}", language="js", timeout=3)
    assert run_ok(sandbox, "kept + 1", language="js", timeout=15).text == "8", "an interrupt keeps the state"
    with pytest.raises(TimeoutException, match="timed out"):
        sandbox.run_code("await new Promise(() => {})", language="js", timeout=3)
    assert run_ok(sandbox, "kept + 2", language="js", timeout=15).text == "9"
    died = sandbox.run_code("process.exit(1)", language="js", timeout=60)
    assert died.error is not None and died.error.name and died.error.value, "kernel death is an error"
    assert run_ok(sandbox, "typeof kept", language="js", timeout=60).text == "undefined", "a new kernel has no state"


def test_packages_in_node_modules_and_npm_install(sandbox):
    name = "cubby-local-" + uuid.uuid4().hex[:8]
    sandbox.files.write(f"{HOME}/pkgsrc/package.json", json.dumps({"name": name, "version": "1.0.0", "main": "index.js"}))
    sandbox.files.write(f"{HOME}/pkgsrc/index.js", "module.exports = (n) => `hello ${n}`\n")
    # npm install of a local package needs no registry.
    out = sandbox.commands.run(f"cd {HOME} && npm install --no-audit --no-fund ./pkgsrc", timeout=180)
    assert out.exit_code == 0, out.stderr
    assert run_ok(sandbox, f"require('{name}')('node')", language="javascript").text == "hello node"
    assert run_ok(sandbox, f"import greet from '{name}'\ngreet('esm')", language="js").text == "hello esm"


def test_typescript_runs_with_node_semantics(sandbox):
    run_ok(sandbox, "interface P { n: number }\nconst base: P = { n: 40 }", language="typescript")
    ex = run_ok(sandbox, "const add = (a: number, b: number): number => a + b\nadd(base.n, 2)", language="ts")
    assert ex.text == "42"
    assert run_ok(sandbox, "import { hostname } from 'os'\ntypeof hostname()", language="ts").text == "string"


def test_deno_is_its_own_language(sandbox):
    ex = run_ok(sandbox, "typeof Deno.version.deno", language="deno")
    assert ex.text == "string"


def test_java_kernel_state_env_cwd_errors(sandbox_factory):
    sbx = sandbox_factory(envs={"SANDBOX_LEVEL": "from-create"})
    run_ok(sbx, "int answer = 40;", language="java")
    assert run_ok(sbx, "answer + 2", language="java").text == "42"
    out = run_ok(sbx, 'System.out.println("hi " + answer);', language="java")
    assert out.logs.stdout == ["hi 40\n"]
    assert run_ok(sbx, 'System.getProperty("user.dir")', language="java").text == HOME
    ex = run_ok(sbx, 'System.getProperty("PER_CALL")', language="java", envs={"PER_CALL": "yes"})
    assert ex.text == "yes"
    assert run_ok(sbx, 'String.valueOf(System.getProperty("PER_CALL"))', language="java").text == "null"
    assert run_ok(sbx, 'System.getenv("SANDBOX_LEVEL")', language="java").text == "from-create"
    err = sbx.run_code('throw new IllegalStateException("bad java");', language="java")
    assert err.error is not None and "bad java" in f"{err.error.name} {err.error.value} {err.error.traceback}"
    assert run_ok(sbx, "answer", language="java").text == "40", "state survives an error"
    ctx = sbx.create_code_context(language="java", cwd="/tmp")
    assert run_ok(sbx, 'System.getProperty("user.dir")', context=ctx).text == "/tmp"
