#!/usr/bin/env bash
# Prints Cubby's figures as medians (see bench/sdk/bench.mjs for what is measured).
# Uses the server named by E2B_API_URL/E2B_SANDBOX_URL/E2B_API_KEY when set;
# otherwise starts bin/cubby on a free port with its own data dir, bridge and subnet.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
(cd "$here/sdk" && [ -d node_modules/e2b ] || npm install --silent --no-audit --no-fund >/dev/null)

if [ -z "${E2B_API_URL:-}" ]; then
  bin=${CUBBY_BIN:-$repo/bin/cubby}
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  data=$(mktemp -d /tmp/cubby-bench.XXXXXX)
  key="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
  CUBBY_API_KEY=$key "$bin" serve --listen "127.0.0.1:$port" --data-dir "$data" \
    --templates-dir "${CUBBY_TEMPLATES_DIR:-$repo/.cache/templates}" \
    --bridge cbbench0 --subnet 10.81.0.0/20 >"$data/server.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
  until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    kill -0 $pid 2>/dev/null || { tail -30 "$data/server.log"; exit 1; }
    sleep 1
  done
  export E2B_API_URL=http://127.0.0.1:$port E2B_SANDBOX_URL=http://127.0.0.1:$port E2B_API_KEY=$key
fi
echo "cubby bench on $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
node "$here/sdk/bench.mjs"
