#!/usr/bin/env bash
# One command from a fresh Debian machine to a running Cubby server with both
# built-in templates (base, and code-interpreter: the default of E2B's
# code-interpreter SDKs) and a real example run with the official E2B
# code-interpreter SDK (runCode with a chart). Re-running it is safe: built
# templates are cached.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (cubby creates containers, mounts and network namespaces)"; exit 1; }

DATA_DIR=${CUBBY_DATA_DIR:-/var/lib/cubby}
LISTEN=${CUBBY_LISTEN:-127.0.0.1:3000}
# The data dir holds the key, the log and the server's database: root only,
# also when an earlier run (or release) left them readable by others.
mkdir -p "$DATA_DIR"
chmod 700 "$DATA_DIR"

scripts/install-deps.sh
echo "==> building bin/cubby and the pinned runc (bin/runc)"
make -s build

# A key the quickstart can use; the server also accepts it through CUBBY_API_KEY.
KEY_FILE="$DATA_DIR/quickstart.key"
[ -s "$KEY_FILE" ] || (umask 077 && echo "e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$KEY_FILE")
KEY=$(cat "$KEY_FILE")
(umask 077 && touch "$DATA_DIR/cubby.log")
chmod 600 "$KEY_FILE" "$DATA_DIR/cubby.log"

if ! curl -fsS "http://$LISTEN/health" >/dev/null 2>&1; then
  echo "==> starting cubby serve on $LISTEN (log: $DATA_DIR/cubby.log); the first start builds the base template"
  CUBBY_API_KEY=$KEY nohup bin/cubby serve --listen "$LISTEN" --data-dir "$DATA_DIR" >>"$DATA_DIR/cubby.log" 2>&1 &
  echo $! > "$DATA_DIR/cubby.pid"
  until curl -fsS "http://$LISTEN/health" >/dev/null 2>&1; do
    kill -0 "$(cat "$DATA_DIR/cubby.pid")" 2>/dev/null || { tail -50 "$DATA_DIR/cubby.log"; exit 1; }
    sleep 2
  done
fi

# The code-interpreter SDKs' Sandbox.create() asks for template
# code-interpreter-v1: build it now (a few minutes the first time, cached after).
# The running server picks it up as soon as it is built.
echo "==> building the code-interpreter template (Jupyter kernels for Python, JavaScript, TypeScript, R, Java, bash)"
bin/cubby template build code-interpreter --templates-dir "$DATA_DIR/templates"

echo "==> running examples/quickstart with the official @e2b/code-interpreter SDK"
(cd examples/quickstart && npm ci --silent --no-audit --no-fund >/dev/null)
export E2B_API_URL=http://$LISTEN E2B_SANDBOX_URL=http://$LISTEN E2B_API_KEY=$KEY
(cd examples/quickstart && node index.mjs)

cat <<MSG

Cubby is running (pid $(cat "$DATA_DIR/cubby.pid" 2>/dev/null || echo "?"), log $DATA_DIR/cubby.log).
Use it from any E2B SDK with:
  export E2B_API_URL=http://$LISTEN E2B_SANDBOX_URL=http://$LISTEN E2B_API_KEY=$KEY
(Without E2B_API_URL an SDK sends the key to E2B's cloud instead.)
The example's chart is in examples/quickstart/quickstart-chart.png.
MSG
