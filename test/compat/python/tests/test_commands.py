"""sandbox.commands with the sync SDK: process.Process Start/Connect/List/
SendInput/CloseStdin/SendSignal (docs/wire/envd.md §3.3)."""

import pytest
from e2b import (
    CommandExitException,
    InvalidArgumentException,
    SandboxException,
    TimeoutException,
)

from helpers import uniq, wait_for


def wait_flag_cmd(flag: str, marker: str) -> str:
    return f"while [ ! -e {flag} ]; do sleep 0.05; done; echo {marker}"


def test_run_stdout_stderr_exit_code(sandbox):
    r = sandbox.commands.run('echo out; echo err >&2; printf "no newline"')
    assert r.exit_code == 0
    assert r.stdout == "out\nno newline"
    assert r.stderr == "err\n"
    assert r.error is None

    out, err = [], []
    sandbox.commands.run(
        "for i in 1 2 3; do echo line$i; echo e$i >&2; done",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert "".join(out) == "line1\nline2\nline3\n"
    assert "".join(err) == "e1\ne2\ne3\n"


def test_large_output(sandbox):
    r = sandbox.commands.run(
        "python3 -c \"import sys; [sys.stdout.write('%06d\\n' % i) for i in range(50000)]\""
    )
    lines = r.stdout.split("\n")
    assert len(lines) == 50_001
    assert lines[49_999] == "049999"


def test_command_exit_exception(sandbox):
    with pytest.raises(CommandExitException) as ei:
        sandbox.commands.run("echo partial; echo boom >&2; exit 3")
    e = ei.value
    assert e.exit_code == 3
    assert e.stdout == "partial\n"
    assert e.stderr == "boom\n"
    assert e.error == "exit status 3"


def test_envs_precedence_and_no_leak(sandbox_factory):
    sbx = sandbox_factory(envs={"CUBBY_A": "create-a", "CUBBY_B": "create-b"})
    base = sbx.commands.run('echo "$HOME|$USER|$(whoami)|$(pwd)"')
    assert base.stdout == "/home/user|user|user|/home/user\n"
    r = sbx.commands.run(
        'echo "$CUBBY_A $CUBBY_B $CUBBY_REQ"', envs={"CUBBY_A": "request-a", "CUBBY_REQ": "req"}
    )
    assert r.stdout == "request-a create-b req\n"
    assert sbx.commands.run('echo "[$CUBBY_A][$CUBBY_REQ]"').stdout == "[create-a][]\n"
    assert sbx.commands.run("sudo bash -c 'echo \"[$CUBBY_REQ]\"'").stdout == "[]\n"


def test_cwd_and_invalid_cwd(sandbox):
    assert sandbox.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    with pytest.raises(InvalidArgumentException, match="does not exist"):
        sandbox.commands.run("pwd", cwd="/definitely/not/here")


def test_user_root_and_sudo(sandbox):
    assert sandbox.commands.run("whoami", user="root").stdout == "root\n"
    assert sandbox.commands.run("whoami").stdout == "user\n"
    assert sandbox.commands.run("sudo echo ok").stdout == "ok\n"


def test_background_stdin_send_and_close(sandbox):
    h = sandbox.commands.run("cat", background=True, stdin=True)
    assert h.pid > 0
    sandbox.commands.send_stdin(h.pid, "hello\n")
    h.send_stdin(b"world\n")
    sandbox.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.exit_code == 0
    assert r.stdout == "hello\nworld\n"


def test_kill_and_unknown_pid(sandbox):
    h = sandbox.commands.run("sleep 120", background=True)
    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as ei:
        h.wait()
    assert ei.value.exit_code == -1
    with pytest.raises(CommandExitException):
        sandbox.commands.run(f"kill -0 {h.pid}")
    assert sandbox.commands.kill(999999) is False


def test_list_running_commands(sandbox):
    a = sandbox.commands.run("sleep 101", background=True, envs={"CUBBY_L": "1"})
    b = sandbox.commands.run("sleep 102", background=True, cwd="/tmp")
    try:
        procs = {p.pid: p for p in sandbox.commands.list()}
        assert len(procs) >= 2
        assert a.pid in procs and b.pid in procs, procs
        assert procs[a.pid].cmd == "/bin/bash"
        assert procs[a.pid].args == ["-l", "-c", "sleep 101"]
        assert procs[a.pid].envs.get("CUBBY_L") == "1"
        assert procs[b.pid].cwd == "/tmp"
    finally:
        sandbox.commands.kill(a.pid)
        sandbox.commands.kill(b.pid)


def test_connect_and_disconnect(sandbox):
    flag = f"/tmp/{uniq('flag')}"
    h = sandbox.commands.run(wait_flag_cmd(flag, "still-alive"), background=True)
    h.disconnect()
    assert any(p.pid == h.pid for p in sandbox.commands.list()), "disconnect killed the process"
    sandbox.commands.run(f"kill -0 {h.pid}")

    c = sandbox.commands.connect(h.pid)
    assert c.pid == h.pid
    sandbox.files.write(flag, "")
    r = c.wait()
    assert r.exit_code == 0
    assert r.stdout == "still-alive\n"


def test_connect_unknown_pid_fails(sandbox):
    with pytest.raises(SandboxException):
        sandbox.commands.connect(999999)


def test_timeout_kills_command(sandbox):
    marker = uniq("sleeper")
    with pytest.raises(TimeoutException):
        sandbox.commands.run(f"exec -a {marker} sleep 60", timeout=2)

    def gone():
        return not any(any(marker in a for a in p.args) for p in sandbox.commands.list())

    wait_for("timed-out process to be gone", gone)
    ps = sandbox.commands.run(f"ps -eo args | grep -c '^{marker}' || true")
    assert ps.stdout.strip() == "0"
