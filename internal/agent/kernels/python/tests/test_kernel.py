"""End to end through a real ipykernel, configured like the code-interpreter
template: the kernel reads config/ipython_kernel_config.py (installed there as
/etc/ipython/ipython_kernel_config.py; here from a private IPYTHONDIR profile)
and imports cubby_display from PYTHONPATH. Messages are checked as the Go
service receives them (JSON without NaN, base64 PNG)."""

import base64
import json
import os
import shutil
import sys

import pytest

from conftest import PKG_ROOT

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")


class Kernel:
    def __init__(self, km, kc):
        self.km, self.kc = km, kc

    def execute(self, code):
        """Run code; return (iopub messages of the cell, execute_reply content)."""
        messages = []
        reply = self.kc.execute_interactive(code, output_hook=messages.append, timeout=60, allow_stdin=False)
        for msg in messages:
            # what the Go service decodes: strict JSON
            json.loads(json.dumps(msg["content"], allow_nan=False))
        return messages, reply["content"]

    def results(self, code):
        """Run code that must succeed; return [(msg_type, data)] of its results."""
        messages, reply = self.execute(code)
        assert reply["status"] == "ok", reply
        return [(m["msg_type"], m["content"]["data"]) for m in messages
                if m["msg_type"] in ("execute_result", "display_data")]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    home = tmp_path_factory.mktemp("kernel")
    profile = home / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    shutil.copy(os.path.join(PKG_ROOT, "ipython_kernel_config.py"), profile)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "PYTHONSTARTUP")}
    env.update(IPYTHONDIR=str(home / "ipython"), PYTHONPATH=PKG_ROOT, MPLCONFIGDIR=str(home / "mpl"))
    km = jupyter_client.KernelManager(kernel_name="python3")
    # the kernelspec says "python3": run it with this (Debian's) interpreter
    km.kernel_spec.argv[0] = sys.executable
    km.start_kernel(env=env, cwd=str(home))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield Kernel(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_extension_loaded_lazily(kernel):
    # nothing heavy is imported on the user's behalf
    [(kind, data)] = kernel.results(
        "import sys\nsorted(m for m in ('pandas', 'matplotlib', 'PIL.Image') if m in sys.modules)")
    assert kind == "execute_result"
    assert data["text/plain"] == "[]"
    assert data["application/json"] == []
    [(_, data)] = kernel.results("'cubby_display' in get_ipython().extension_manager.loaded")
    assert data["text/plain"] == "True"


def test_traceback_has_no_colors(kernel):
    messages, reply = kernel.execute("1 / 0")
    assert reply["status"] == "error"
    [err] = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert err["ename"] == "ZeroDivisionError"
    assert err["traceback"] and not any("\x1b[" in line for line in err["traceback"])


def test_plt_show_gives_one_display_data(kernel):
    results = kernel.results("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
    assert [k for k, _ in results] == ["display_data"]
    data = results[0][1]
    assert set(data) == {"text/plain", "image/png", "e2b/chart"}
    assert data["text/plain"] == "<Figure size 640x480 with 1 Axes>"
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    chart = data["e2b/chart"]
    assert chart["type"] == "line"
    assert chart["elements"] == [{"label": "Line 0", "points": [[1.0, 1.0], [2.0, 4.0], [3.0, 9.0]]}]


def test_show_then_expression_gives_two_results(kernel):
    results = kernel.results("plt.bar(['a', 'b'], [1, 2])\nplt.show()\n1 + 1")
    assert [k for k, _ in results] == ["display_data", "execute_result"]
    assert results[0][1]["e2b/chart"]["type"] == "bar"
    assert results[1][1] == {"text/plain": "2"}


def test_unshown_figure_is_flushed_after_the_cell(kernel):
    results = kernel.results("plt.scatter([1], [2])\nNone")
    assert [k for k, _ in results] == ["display_data"]
    assert results[0][1]["e2b/chart"]["type"] == "scatter"


def test_dataframe_result(kernel):
    [(kind, data)] = kernel.results(
        "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 't': pd.to_datetime(['2024-01-01'] * 3)})")
    assert kind == "execute_result"
    assert data["e2b/data"] == {"a": [1, 2, 3], "t": ["2024-01-01T00:00:00"] * 3}
    assert "text/html" in data and "text/plain" in data


def test_numpy_json_and_long_sequences(kernel):
    [(_, data)] = kernel.results("import numpy as np\n{'v': np.arange(3), 'f': np.float32(0.5), 'n': np.nan}")
    assert data["application/json"] == {"v": [0, 1, 2], "f": 0.5, "n": None}
    [(_, data)] = kernel.results("list(range(2000))")
    text = data["text/plain"]
    assert text.endswith("1999]") and "..." not in text  # max_seq_length = 0: not truncated


def test_pil_show_and_save(kernel, tmp_path):
    results = kernel.results("from PIL import Image\nimg = Image.new('L', (3, 3))\nimg.show()")
    assert [k for k, _ in results] == ["display_data"]
    assert base64.b64decode(results[0][1]["image/png"]).startswith(b"\x89PNG")
    target = tmp_path / "saved.png"
    results = kernel.results(f"img.save({str(target)!r})")
    assert [k for k, _ in results] == ["display_data"]
    assert "image/png" in results[0][1]
    assert target.exists()
