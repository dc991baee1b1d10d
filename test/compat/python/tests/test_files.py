"""sandbox.files with the sync SDK: envd /files upload/download (docs/wire/envd.md §3.4)
and the filesystem.Filesystem RPCs (§3.3)."""

import hashlib
import io

import pytest
from e2b import FileNotFoundException, FileType, InvalidArgumentException

from helpers import HOME


def pattern(n: int, seed: int = 7) -> bytes:
    out = bytearray(n)
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        out[i] = (x >> 16) & 0xFF
    return bytes(out)


def sha(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def test_write_read_text_relative_to_home(sandbox):
    text = "Hello, Cubby!\nünïcødé ✓ 🚀\n"
    info = sandbox.files.write("hello.txt", text)
    assert info.name == "hello.txt"
    assert info.path == f"{HOME}/hello.txt"
    assert info.type == FileType.FILE
    assert sandbox.files.read("hello.txt") == text
    assert sandbox.files.read(f"{HOME}/hello.txt") == text
    assert sandbox.files.read("~/hello.txt") == text
    assert sandbox.commands.run("cat /home/user/hello.txt").stdout == text


def test_bytes_stream_and_gzip_round_trip(sandbox):
    data = bytes(range(256)) + pattern(300_000)
    sandbox.files.write("bin/data.bin", data)
    assert sha(sandbox.files.read("bin/data.bin", format="bytes")) == sha(data)
    assert sha(sandbox.files.read("bin/data.bin", format="bytes", gzip=True)) == sha(data)
    with sandbox.files.read("bin/data.bin", format="stream") as reader:
        assert sha(b"".join(reader)) == sha(data)
    out = sandbox.commands.run("sha256sum /home/user/bin/data.bin").stdout
    assert out.split(" ")[0] == sha(data)


def test_file_like_octet_stream_and_gzip_uploads(sandbox):
    data = pattern(200_000, 3)
    sandbox.files.write("up/io.bin", io.BytesIO(data))
    assert sha(sandbox.files.read("up/io.bin", format="bytes")) == sha(data)

    sandbox.files.write("up/gz.txt", "gzip me " * 1000, gzip=True)
    assert sandbox.files.read("up/gz.txt") == "gzip me " * 1000

    sandbox.files.write("up/octet.txt", "plain octet", use_octet_stream=True)
    assert sandbox.files.read("up/octet.txt") == "plain octet"


def test_large_file(sandbox):
    data = pattern(8 * 1024 * 1024, 99)
    sandbox.files.write("/tmp/large.bin", data)
    assert sandbox.files.get_info("/tmp/large.bin").size == len(data)
    back = sandbox.files.read("/tmp/large.bin", format="bytes")
    assert len(back) == len(data)
    assert sha(back) == sha(data)


def test_empty_file_and_overwrite(sandbox):
    sandbox.files.write("empty.txt", "")
    assert sandbox.files.read("empty.txt") == ""
    assert len(sandbox.files.read("empty.txt", format="bytes")) == 0
    sandbox.files.write("over.txt", "a much longer first version")
    sandbox.files.write("over.txt", "short")
    assert sandbox.files.read("over.txt") == "short"


def test_write_files_multi(sandbox):
    infos = sandbox.files.write_files(
        [
            {"path": "multi/a.txt", "data": "A"},
            {"path": f"{HOME}/multi/nested/b.txt", "data": b"BB"},
            {"path": "/tmp/multi-c.bin", "data": bytes([0, 1, 2])},
        ]
    )
    assert sorted(i.path for i in infos) == sorted(
        [f"{HOME}/multi/a.txt", f"{HOME}/multi/nested/b.txt", "/tmp/multi-c.bin"]
    )
    assert sandbox.files.read("multi/a.txt") == "A"
    assert sandbox.files.read("multi/nested/b.txt") == "BB"
    assert bytes(sandbox.files.read("/tmp/multi-c.bin", format="bytes")) == bytes([0, 1, 2])


def test_list_depth_and_order(sandbox):
    base = f"{HOME}/tree"
    sandbox.files.write_files(
        [
            {"path": f"{base}/file1.txt", "data": "1"},
            {"path": f"{base}/subdir1/subdir1_1/deep.txt", "data": "deep"},
            {"path": f"{base}/subdir2/file2.txt", "data": "2"},
        ]
    )
    assert sandbox.files.make_dir(f"{base}/subdir1/subdir1_2") is True

    d1 = sandbox.files.list(base)
    assert [e.path for e in d1] == [f"{base}/file1.txt", f"{base}/subdir1", f"{base}/subdir2"]
    assert [e.type for e in d1] == [FileType.FILE, FileType.DIR, FileType.DIR]

    d2 = sandbox.files.list(base, depth=2)
    assert [e.path for e in d2] == [
        f"{base}/file1.txt",
        f"{base}/subdir1",
        f"{base}/subdir1/subdir1_1",
        f"{base}/subdir1/subdir1_2",
        f"{base}/subdir2",
        f"{base}/subdir2/file2.txt",
    ]
    with pytest.raises(FileNotFoundException):
        sandbox.files.list(f"{base}/missing")


def test_exists_and_get_info(sandbox):
    sandbox.files.write("info/file.txt", "12345")
    assert sandbox.files.exists("info/file.txt") is True
    assert sandbox.files.exists("info") is True
    assert sandbox.files.exists("info/nope.txt") is False

    f = sandbox.files.get_info("info/file.txt")
    assert f.name == "file.txt"
    assert f.path == f"{HOME}/info/file.txt"
    assert f.type == FileType.FILE
    assert f.size == 5
    assert f.permissions == "-rw-r--r--"
    assert f.mode & 0o777 == 0o644
    assert f.owner == "user"
    assert f.group == "user"
    assert f.modified_time is not None

    d = sandbox.files.get_info("info")
    assert d.type == FileType.DIR
    assert d.permissions == "drwxr-xr-x"

    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info("info/nope.txt")


def test_make_dir_rename_remove(sandbox):
    assert sandbox.files.make_dir("mk/a/b") is True
    assert sandbox.files.make_dir("mk/a/b") is False
    assert sandbox.files.get_info("mk/a").owner == "user"
    sandbox.files.write("mk/file", "x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.make_dir("mk/file")

    sandbox.files.write("mv/old.txt", "content")
    moved = sandbox.files.rename("mv/old.txt", "mv/new.txt")
    assert moved.path == f"{HOME}/mv/new.txt"
    assert sandbox.files.exists("mv/old.txt") is False
    assert sandbox.files.read("mv/new.txt") == "content"
    with pytest.raises(FileNotFoundException):
        sandbox.files.rename("nope.txt", "x.txt")

    sandbox.files.remove("mv")
    assert sandbox.files.exists("mv") is False
    sandbox.files.remove("mv")  # missing is fine


def test_user_root_writes_to_root_home(sandbox):
    info = sandbox.files.write("root-file.txt", "root data", user="root")
    assert info.path == "/root/root-file.txt"
    assert sandbox.files.read("root-file.txt", user="root") == "root data"
    assert sandbox.files.get_info("/root/root-file.txt", user="root").owner == "root"
    assert sandbox.commands.run("cat /root/root-file.txt", user="root").stdout == "root data"


def test_file_metadata(sandbox):
    info = sandbox.files.write("meta.txt", "m", metadata={"Purpose": "Test Run", "x-id": "42"})
    assert info.metadata == {"purpose": "Test Run", "x-id": "42"}
    assert sandbox.files.get_info("meta.txt").metadata == {"purpose": "Test Run", "x-id": "42"}
    sandbox.files.write("meta.txt", "m2")
    assert not sandbox.files.get_info("meta.txt").metadata
    with pytest.raises(InvalidArgumentException):
        sandbox.files.write("bad.txt", "x", metadata={"k" * 300: "v"})


def test_missing_file_errors(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("no/such/file.txt")
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("/no/such/file", format="bytes")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.read("/tmp")
