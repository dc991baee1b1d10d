#!/usr/bin/env bash
# Cubby's benchmark: `make bench` (or bench/run.sh after `make build`). Prints one
# table (see bench/sdk/bench.mjs for what is measured and the BENCH_* size knobs).
#
# Starts its own servers, each with its own data dir, bridge and subnet:
#   runc  on bridge ${CUBBY_BENCH_BRIDGE:-cbbench}0, 10.81.0.0/20 (every section)
#   runsc on bridge ${CUBBY_BENCH_BRIDGE:-cbbench}1, 10.81.16.0/20 (per-runtime rows;
#         skipped when bin/runsc is missing: build it with `make runsc`)
#   pyonly on bridge ${CUBBY_BENCH_BRIDGE:-cbbench}3, 10.81.48.0/20 with
#         --default-contexts python (idle memory without the Deno kernel)
#   lean  on bridge ${CUBBY_BENCH_BRIDGE:-cbbench}4, 10.81.64.0/20 with
#         --default-contexts python --python-preload "" (no data stack in kernels)
#   pool  on bridge ${CUBBY_BENCH_BRIDGE:-cbbench}2, 10.81.32.0/20 with
#         --pool code-interpreter=$BENCH_POOL_SIZE (warm-pool rows; measured first,
#         then stopped so its refills do not load the other sections)
# With E2B_API_URL/E2B_SANDBOX_URL/E2B_API_KEY set it uses that (local, runc) server
# instead, and CUBBY_BENCH_RUNSC_URL (same key) for the gVisor rows.
# Needs root (servers, cgroup and /proc reads), Go, Node ≥ 20, and the built
# templates in $CUBBY_TEMPLATES_DIR (default .cache/templates; `make templates`).
# BENCH_OUT=<file> also saves every figure as JSON.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "bench/run.sh must run as root" >&2; exit 1; }
(cd "$here/sdk" && [ -d node_modules/@e2b/code-interpreter ] || npm install --silent --no-audit --no-fund >/dev/null)

work=$(mktemp -d /tmp/cubby-bench.XXXXXX)
pids=() urls=() bridges=()
key=${E2B_API_KEY:-"e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"}

# cleanup kills every sandbox left on the servers this script started (they
# outlive a server stop by design), then the servers, then removes the work dir.
cleanup() {
  for url in "${urls[@]}"; do
    for id in $(curl -fsS -H "X-API-Key: $key" "$url/sandboxes" 2>/dev/null |
      python3 -c 'import json,sys; print(" ".join(s["sandboxID"] for s in json.load(sys.stdin)))' 2>/dev/null); do
      curl -fsS -X DELETE -H "X-API-Key: $key" "$url/sandboxes/$id" >/dev/null 2>&1 || true
    done
  done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Servers keep their bridge and nftables table for their sandboxes; remove them.
  for b in "${bridges[@]}"; do "$bin" network teardown --bridge "$b" >/dev/null 2>&1 || true; done
  # runsc keeps a netns bind mount in its state root under the data dir.
  awk -v w="$work/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# bench_limits lift the admission limits (cubby serve --team-max-sandboxes, --max-memory-mb,
# --create-rate): the density rows hold 100 sandboxes with 1 GiB limits at once, and the
# throughput rows create faster than a team's default rate.
bench_limits=(--team-max-sandboxes 0 --max-memory-mb 1048576 --create-rate 0)

# start_server NAME BRIDGE SUBNET [serve flags...]: starts bin/cubby serve on a free
# loopback port and prints its URL once /health answers.
start_server() {
  local name=$1 bridge=$2 subnet=$3
  shift 3
  local port data=$work/$name
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$data"
  CUBBY_API_KEY=$key "$bin" serve --listen "127.0.0.1:$port" --data-dir "$data" \
    --templates-dir "${CUBBY_TEMPLATES_DIR:-$repo/.cache/templates}" \
    --bridge "$bridge" --subnet "$subnet" "${bench_limits[@]}" "$@" >"$data/server.log" 2>&1 &
  pids+=($!)
  urls+=("http://127.0.0.1:$port")
  bridges+=("$bridge")
  server_url=http://127.0.0.1:$port
  until curl -fsS "$server_url/health" >/dev/null 2>&1; do
    kill -0 "${pids[-1]}" 2>/dev/null || { tail -30 "$data/server.log" >&2; return 1; }
    sleep 0.5
  done
}

bridge=${CUBBY_BENCH_BRIDGE:-cbbench}
if [ -z "${E2B_API_URL:-}" ]; then
  bin=${CUBBY_BIN:-$repo/bin/cubby}
  start_server runc "${bridge}0" 10.81.0.0/20 --runtime runc
  export E2B_API_URL=$server_url E2B_SANDBOX_URL=$server_url E2B_API_KEY=$key
  runsc=${CUBBY_RUNSC:-$repo/bin/runsc}
  if [ -z "${CUBBY_BENCH_RUNSC_URL:-}" ] && [ -x "$runsc" ]; then
    start_server runsc "${bridge}1" 10.81.16.0/20 --runtime runsc --runsc "$runsc"
    export CUBBY_BENCH_RUNSC_URL=$server_url
  fi
  start_server pyonly "${bridge}3" 10.81.48.0/20 --runtime runc --default-contexts python
  export CUBBY_BENCH_PYONLY_URL=$server_url
  start_server lean "${bridge}4" 10.81.64.0/20 --runtime runc --default-contexts python --python-preload ""
  export CUBBY_BENCH_LEAN_URL=$server_url
  pool_size=${BENCH_POOL_SIZE:-20} # 0 = no pool server (the warm-pool rows are then missing)
  if [ "$pool_size" -gt 0 ]; then
    start_server pool "${bridge}2" 10.81.32.0/20 --runtime runc --pool "code-interpreter=$pool_size" \
      --pool-memory-mb "${BENCH_POOL_MEMORY_MIB:-$((pool_size * 400))}"
    export CUBBY_BENCH_POOL_URL=$server_url CUBBY_BENCH_POOL_PID=${pids[-1]}
  fi
fi
(cd "$repo" && go build -o "$work/benchmem" ./bench/cmd/benchmem)
export CUBBY_BENCH_MEM=$work/benchmem

load=$(cut -d' ' -f1-3 /proc/loadavg)
mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
echo "cubby bench: $(nproc) cores, $mem, kernel $(uname -r), load $load, $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)"
node "$here/sdk/bench.mjs"
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
