"""Volumes through the official SDK: Volume.create, volume_mounts on create,
data across sandboxes, the volume content API, destroy."""

import os
import uuid

import pytest
from e2b import Volume


@pytest.fixture(autouse=True)
def _volume_api():
    if not os.environ.get("E2B_VOLUME_API_URL"):
        pytest.fail("E2B_VOLUME_API_URL is not set (run.sh exports it)", pytrace=False)


def test_volume_across_sandboxes(sandbox_factory):
    vol = Volume.create("py" + uuid.uuid4().hex[:10])
    try:
        a = sandbox_factory(volume_mounts={"/mnt/vol": vol})
        a.commands.run("echo from-a > /mnt/vol/a.txt")
        vol.write_file("/api.txt", "from the API")
        b = sandbox_factory(volume_mounts={"/data": vol.name})
        assert b.commands.run("cat /data/a.txt /data/api.txt").stdout == "from-a\nfrom the API"
        assert vol.read_file("/a.txt") == "from-a\n"
        assert sorted(e.path for e in vol.list("/")) == ["/a.txt", "/api.txt"]
        vol.remove("/api.txt")
        assert not vol.exists("/api.txt")
        a.kill()
        b.kill()
    finally:
        Volume.destroy(vol.volume_id)
    assert Volume.destroy(vol.volume_id) is False
