"""Directory watching.

The sync SDK uses the polling RPCs CreateWatcher/GetWatcherEvents/
RemoveWatcher; the async SDK uses the streaming WatchDir (docs/wire/envd.md §3.3).
"""

import pytest
from e2b import FileNotFoundException, FilesystemEventType, SandboxException

from helpers import HOME, async_wait_for, wait_for


def names(events):
    return [(e.type.value, e.name) for e in events]


class Collector:
    """Accumulates events from repeated get_new_events() polls."""

    def __init__(self, handle):
        self.handle = handle
        self.events = []

    def poll_until(self, name, type_, timeout=10.0):
        def check():
            self.events.extend(self.handle.get_new_events())
            return any(e.name == name and e.type == type_ for e in self.events)

        wait_for(f"{type_.value} {name} in {names(self.events)}", check, timeout=timeout, interval=0.2)


def test_sync_watch_dir_write_event(sandbox):
    d = f"{HOME}/watched"
    sandbox.files.write(f"{d}/existing.txt", "v1")
    handle = sandbox.files.watch_dir(d)
    try:
        c = Collector(handle)
        sandbox.files.write(f"{d}/existing.txt", "v2")
        c.poll_until("existing.txt", FilesystemEventType.WRITE)
        sandbox.files.write(f"{d}/fresh.txt", "new")
        c.poll_until("fresh.txt", FilesystemEventType.CREATE)
        sandbox.files.remove(f"{d}/fresh.txt")
        c.poll_until("fresh.txt", FilesystemEventType.REMOVE)
    finally:
        handle.stop()


def test_sync_watch_dir_buffer_is_drained_by_each_poll(sandbox):
    d = f"{HOME}/drain"
    sandbox.files.make_dir(d)
    handle = sandbox.files.watch_dir(d)
    try:
        c = Collector(handle)
        sandbox.files.write(f"{d}/one.txt", "1")
        c.poll_until("one.txt", FilesystemEventType.CREATE)
        sandbox.files.write(f"{d}/two.txt", "2")
        c.poll_until("two.txt", FilesystemEventType.CREATE)
        # Each poll returns only new events: one.txt was created once.
        created_one = [e for e in c.events if e.name == "one.txt" and e.type == FilesystemEventType.CREATE]
        assert len(created_one) == 1, names(c.events)
    finally:
        handle.stop()
    with pytest.raises(SandboxException):
        handle.get_new_events()


def test_sync_watch_dir_recursive(sandbox):
    d = f"{HOME}/rec"
    sandbox.files.make_dir(d)
    handle = sandbox.files.watch_dir(d, recursive=True)
    try:
        c = Collector(handle)
        assert sandbox.files.make_dir(f"{d}/sub") is True
        c.poll_until("sub", FilesystemEventType.CREATE)
        sandbox.files.write(f"{d}/sub/file.txt", "nested")
        c.poll_until("sub/file.txt", FilesystemEventType.CREATE)
    finally:
        handle.stop()


def test_sync_watch_missing_dir(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.watch_dir(f"{HOME}/missing-dir")


async def test_async_watch_dir_stream(async_sandbox):
    sbx = async_sandbox
    d = f"{HOME}/awatch"
    await sbx.files.write(f"{d}/existing.txt", "v1")
    events = []
    handle = await sbx.files.watch_dir(d, on_event=events.append, recursive=True)
    try:
        await sbx.files.write(f"{d}/existing.txt", "v2")
        await async_wait_for(
            f"WRITE existing.txt in {names(events)}",
            lambda: any(e.name == "existing.txt" and e.type == FilesystemEventType.WRITE for e in events),
        )
        assert await sbx.files.make_dir(f"{d}/sub") is True
        await async_wait_for(
            f"CREATE sub in {names(events)}",
            lambda: any(e.name == "sub" and e.type == FilesystemEventType.CREATE for e in events),
        )
        await sbx.files.write(f"{d}/sub/x.txt", "x")
        await async_wait_for(
            f"CREATE sub/x.txt in {names(events)}",
            lambda: any(e.name == "sub/x.txt" and e.type == FilesystemEventType.CREATE for e in events),
        )
    finally:
        await handle.stop()


async def test_async_watch_dir_include_entry(async_sandbox):
    sbx = async_sandbox
    d = f"{HOME}/aentry"
    await sbx.files.make_dir(d)
    events = []
    handle = await sbx.files.watch_dir(d, on_event=events.append, include_entry=True)
    try:
        await sbx.files.write(f"{d}/e.txt", "abc")
        ev = await async_wait_for(
            f"event with entry in {names(events)}",
            lambda: next((e for e in events if e.name == "e.txt" and e.entry is not None), None),
        )
        assert ev.entry.name == "e.txt"
        assert ev.entry.path == f"{d}/e.txt"
    finally:
        await handle.stop()
