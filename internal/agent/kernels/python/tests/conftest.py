"""Fixtures: a real IPython InteractiveShell with cubby_display loaded whose
display outputs are recorded, and a real ipykernel driven by jupyter_client.

Run from internal/agent/kernels/python with Debian's interpreter:
    /usr/bin/python3 -m pytest -q tests
"""

import json
import os
import sys

import pytest

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

from IPython.core.displayhook import DisplayHook  # noqa: E402
from IPython.core.displaypub import DisplayPublisher  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402


class RecordingPublisher(DisplayPublisher):
    """Records display() calls as ("display_data", data, metadata)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outputs = []

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        self.outputs.append(("display_data", data, metadata or {}))


class RecordingHook(DisplayHook):
    """Records the cell's last expression as ("execute_result", data, metadata)."""

    def write_format_data(self, format_dict, md_dict=None):
        self.shell.display_pub.outputs.append(("execute_result", format_dict, md_dict or {}))


class RecordingShell(InteractiveShell):
    display_pub_class = RecordingPublisher
    displayhook_class = RecordingHook


class Session:
    """Runs cells in the shell and returns what they displayed."""

    def __init__(self, shell):
        self.shell = shell

    def run(self, code):
        """Run code; return [(kind, data, metadata), ...]; raise on errors."""
        self.shell.display_pub.outputs = []
        result = self.shell.run_cell(code, store_history=True)
        result.raise_error()
        return list(self.shell.display_pub.outputs)

    def one(self, code, kind="display_data"):
        """Run code that must display exactly one result of the given kind."""
        outputs = self.run(code)
        assert [o[0] for o in outputs] == [kind], outputs
        return outputs[0][1]


@pytest.fixture(scope="session")
def session():
    # The extension must pick the inline backend itself (MPLBACKEND unset).
    assert "matplotlib.pyplot" not in sys.modules
    os.environ.pop("MPLBACKEND", None)
    shell = RecordingShell.instance()
    shell.extension_manager.load_extension("cubby_display")
    yield Session(shell)
    shell.extension_manager.unload_extension("cubby_display")


@pytest.fixture
def run(session):
    """Each test starts with no open figures."""
    session.run("import matplotlib.pyplot as plt\nplt.close('all')")
    yield session
    session.run("plt.close('all')")


def strict_json(value):
    """Round-trip value through JSON as Go's decoder would accept it (no NaN)."""
    return json.loads(json.dumps(value, allow_nan=False))
