#!/usr/bin/env bash
# Runs check.py (the official Python `mcp` client against Cubby's MCP tools)
# in a venv next to it, installing requirements.txt first when it changed.
# Needs CUBBY_URL, CUBBY_API_KEY and CUBBY_BIN (see check.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
stamp="$venv/.cubby-stamp"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  echo "$want" > "$stamp"
fi
exec "$venv/bin/python" "$here/check.py"
