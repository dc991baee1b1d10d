"""Cubby's IPython extension: rich results in the format E2B's SDKs decode.

Load it in a kernel with ``--IPKernelApp.extra_extensions=cubby_display``,
``c.InteractiveShellApp.extra_extensions = ["cubby_display"]`` in an IPython
config file, or ``%load_ext cubby_display``. It

* adds the ``e2b/data`` display formatter (pandas DataFrame -> column lists,
  docs/wire/code-interpreter.md) and the ``e2b/chart`` formatter (matplotlib Figure -> chart
  JSON);
* replaces the ``application/json`` formatter with one that also formats lists
  and dicts, numpy-safe;
* turns off colours in tracebacks (``InteractiveShell.colors = "NoColor"``);
* makes matplotlib use the inline backend unless MPLBACKEND is set, so
  ``plt.show()`` displays the figure (png + text + chart);
* patches PIL so ``Image.show()`` and ``Image.save(path)`` display the image.
"""

import os

from . import formatters, images

#: The matplotlib backend selected when MPLBACKEND is unset.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

_STATE_ATTR = "_cubby_display_state"

__all__ = ["load_ipython_extension", "unload_ipython_extension", "INLINE_BACKEND"]


def load_ipython_extension(ip):
    """IPython extension entry point; safe to call more than once."""
    if getattr(ip, _STATE_ATTR, None) is not None:
        return
    _no_color(ip)
    old_json = formatters.install(ip)
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    images.install()
    setattr(ip, _STATE_ATTR, {"old_json": old_json})


def unload_ipython_extension(ip):
    """Remove the formatters and the PIL patch (colours stay off)."""
    state = getattr(ip, _STATE_ATTR, None)
    if state is None:
        return
    formatters.uninstall(ip, state["old_json"])
    images.uninstall()
    setattr(ip, _STATE_ATTR, None)


def _no_color(ip):
    ip.colors = "NoColor"
    for name in ("InteractiveTB", "SyntaxTB"):
        tb = getattr(ip, name, None)
        if tb is not None:
            tb.set_colors("NoColor")
