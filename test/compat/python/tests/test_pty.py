"""sandbox.pty: Start with a PTY, SendInput(pty), Update (resize) and
SendSignal (docs/wire/envd.md §3.3), with both the async and the sync SDK."""

import threading

import pytest
from e2b import CommandExitException, PtySize

from helpers import async_wait_for, uniq, wait_for


class Screen:
    """Accumulates PTY output bytes as text."""

    def __init__(self):
        self.buf = bytearray()
        self.lock = threading.Lock()

    def feed(self, data: bytes):
        with self.lock:
            self.buf.extend(data)

    @property
    def text(self) -> str:
        with self.lock:
            return self.buf.decode("utf-8", errors="replace")


async def test_async_pty_create_input_resize_kill(async_sandbox):
    sbx = async_sandbox
    screen = Screen()
    h = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=screen.feed, timeout=60)
    try:
        assert h.pid > 0
        await sbx.pty.send_stdin(h.pid, b'echo "A=$((40+2))" "T=[$TERM]"\n')
        await async_wait_for(
            f"A=42 in {screen.text!r}", lambda: "A=42 T=[xterm-256color]" in screen.text
        )

        await sbx.pty.send_stdin(h.pid, b'echo "C1=$(tput cols)"\n')
        await async_wait_for(f"C1=80 in {screen.text!r}", lambda: "C1=80" in screen.text)
        await sbx.pty.resize(h.pid, PtySize(rows=45, cols=123))
        await sbx.pty.send_stdin(h.pid, b'echo "C2=$(tput cols)" "S=$(stty size)"\n')
        await async_wait_for(
            f"C2=123 in {screen.text!r}", lambda: "C2=123 S=45 123" in screen.text
        )

        assert await sbx.pty.kill(h.pid) is True
        with pytest.raises(CommandExitException):
            await h.wait()

        async def gone():
            return not any(p.pid == h.pid for p in await sbx.commands.list())

        await async_wait_for("killed PTY to leave the process list", gone)
        assert await sbx.pty.kill(999999) is False
    finally:
        await sbx.pty.kill(h.pid)


def test_sync_pty_exit_code(sandbox):
    screen = Screen()
    h = sandbox.pty.create(PtySize(rows=24, cols=100))
    result = {}

    def pump():
        try:
            result["r"] = h.wait(on_pty=screen.feed)
        except Exception as exc:  # noqa: BLE001 - asserted below
            result["e"] = exc

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        marker = uniq("m")
        sandbox.pty.send_stdin(h.pid, f'echo "{marker}=$(tput cols)"\n'.encode())
        wait_for(f"{marker}=100 in {screen.text!r}", lambda: f"{marker}=100" in screen.text)
        sandbox.pty.send_stdin(h.pid, b"exit 0\n")
        t.join(timeout=20)
        assert not t.is_alive(), "PTY did not end after exit"
        assert "e" not in result, result.get("e")
        assert result["r"].exit_code == 0
    finally:
        sandbox.pty.kill(h.pid)
