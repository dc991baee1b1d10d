# Cubby code-interpreter kernel configuration (installed as
# /etc/ipython/ipython_kernel_config.py; read by every IPython kernel).
# docs/wire/code-interpreter.md: plain tracebacks, no truncation of long sequences, and the
# cubby_display extension for e2b/data, e2b/chart, numpy-safe JSON and PIL.
c = get_config()  # noqa: F821 (provided by IPython's config loader)
c.InteractiveShell.colors = "NoColor"
c.PlainTextFormatter.max_seq_length = 0
c.InteractiveShellApp.extra_extensions = ["cubby_display"]
