#!/usr/bin/env bash
# Runs the E2B SDK compatibility suites (official JS and Python SDKs,
# unmodified) against a freshly started Cubby server: the core SDK suites
# (js/, python/: e2b) and the code-interpreter suites (ci-js/, ci-python/:
# @e2b/code-interpreter and e2b-code-interpreter, template code-interpreter),
# each against every SDK set under sdks/: "pinned" (the versions the suites
# were first written against) and "latest" (the newest published on npm and
# PyPI when last bumped). Each set pins its SDKs in lock files
# (sdks/<set>/<suite>/package-lock.json, requirements.lock; regenerate them
# with lock.sh after a bump).
#
#   test/compat/run.sh [--js-only | --py-only] [--ci-only | --core-only] [--sdk SET|all]
#
# --js-only / --py-only pick the language, --ci-only / --core-only the kind of
# suite, --sdk one set (default all); the default runs every suite of every
# set. The JavaScript and the Python suites run at the same time (two lanes);
# within a lane the suites run one after the other. A suite whose set resolves
# to exactly the same packages as a set already run is not run again.
#
# Steps: build bin/cubby (and, for the code-interpreter suites, the
# code-interpreter template; cached), start the test internet the network
# tests use (test/compat/internet: echo servers, DNS and a SOCKS5 proxy in a
# network namespace; CUBBY_TEST_INTERNET names its JSON description), start
# the test registries the Template suites pull base images from
# (internal/testenv/testregistry/cmd/testregistry: a minimal Debian image, anonymous
# and behind a password; the anonymous one is the server's Docker Hub
# mirror), start `cubby serve` on a free loopback port with a generated API
# key and its egress proxy pointed at that internet, wait for GET /health (up
# to 20 min: the first start builds the base template), install each set's
# dependencies (cached by the content of its lock file under
# .cache/compat/deps), run the suites, stop the server (removing its bridge
# and nftables table), the registries and the test internet. Prints the pass
# counts of every suite and exits non-zero if anything failed.
#
# Environment knobs:
#   CUBBY_DATA_DIR            server data dir (default: <repo>/.cache/compat-data)
#   CUBBY_COMPAT_PORT         listen port (default: a free port)
#   CUBBY_COMPAT_LOG          server log file (default: <repo>/.cache/compat/server.log)
#   CUBBY_COMPAT_CONCURRENCY  parallel tests per suite (default: 3)
#   CUBBY_COMPAT_HEALTH_WAIT  seconds to wait for /health (default: 1200)
#   CUBBY_COMPAT_SKIP_BUILD=1 use an existing bin/cubby (and built templates)
#   CUBBY_COMPAT_BRIDGE, CUBBY_COMPAT_SUBNET  the server's bridge and subnet
#   CUBBY_BIN                 the cubby binary to run (default: <repo>/bin/cubby)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

lang_js=1
lang_py=1
kind_core=1
kind_ci=1
sdk_sets=()
while (($# > 0)); do
  case "$1" in
    --js-only) lang_py=0 ;;
    --py-only) lang_js=0 ;;
    --ci-only) kind_core=0 ;;
    --core-only) kind_ci=0 ;;
    --sdk) shift; [[ "${1:-}" == all ]] || sdk_sets+=("${1:?--sdk needs a set name or all}") ;;
    -h|--help) sed -n '2,43p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $lang_js == 0 && $lang_py == 0 ]]; then
  echo "run.sh: --js-only and --py-only are mutually exclusive" >&2
  exit 2
fi
if [[ $kind_core == 0 && $kind_ci == 0 ]]; then
  echo "run.sh: --ci-only and --core-only are mutually exclusive" >&2
  exit 2
fi
if ((${#sdk_sets[@]} == 0)); then
  mapfile -t sdk_sets < <(ls "$here/sdks" | sort -r) # pinned first
fi
for set in "${sdk_sets[@]}"; do
  [[ -d "$here/sdks/$set" ]] || { echo "run.sh: no SDK set $set under $here/sdks" >&2; exit 2; }
done
js_suites=() py_suites=()
((lang_js && kind_core)) && js_suites+=(js)
((lang_js && kind_ci)) && js_suites+=(ci-js)
((lang_py && kind_core)) && py_suites+=(python)
((lang_py && kind_ci)) && py_suites+=(ci-python)

log() { printf '[compat] %s\n' "$*" >&2; }

concurrency="${CUBBY_COMPAT_CONCURRENCY:-3}"
health_wait="${CUBBY_COMPAT_HEALTH_WAIT:-1200}"
data_dir="${CUBBY_DATA_DIR:-$repo/.cache/compat-data}"
work="$repo/.cache/compat"
server_log="${CUBBY_COMPAT_LOG:-$work/server.log}"
bridge="${CUBBY_COMPAT_BRIDGE:-cbcompat0}"
subnet="${CUBBY_COMPAT_SUBNET:-10.79.0.0/20}"
mkdir -p "$data_dir" "$(dirname "$server_log")" "$work/deps" "$work/results"

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="$PATH:/usr/local/go/bin"
fi

# ---------------------------------------------------------------- dependencies

# deps_js SET SUITE: prints the node_modules dir of the set's lock file,
# installing it (npm ci) into .cache/compat/deps/js-<hash of the resolved
# packages and the node version> the first time.
deps_js() {
  local src="$here/sdks/$1/$2" key dir
  key="$(node -e '
    const l = require(process.argv[1]); delete l.packages[""];
    process.stdout.write(JSON.stringify([l.packages, process.versions.modules]))' "$src/package-lock.json" |
    sha256sum | cut -c1-16)"
  dir="$work/deps/js-$key"
  if [[ ! -f "$dir/.complete" ]]; then
    log "installing $1/$2 JS dependencies (npm ci) into $dir"
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# deps_py SET SUITE: prints the venv of the set's lock file, installing it
# (pip --require-hashes) into .cache/compat/deps/py-<hash of the lock file and
# the Python version> the first time.
deps_py() {
  local lock="$here/sdks/$1/$2/requirements.lock" key dir
  key="$( (cat "$lock"; python3 -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)"
  dir="$work/deps/py-$key"
  if [[ ! -f "$dir/.complete" ]]; then
    log "installing $1/$2 Python dependencies (pip) into $dir"
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$lock" >&2
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# ---------------------------------------------------------------------- server

server_pid=""
registry_pid=""

stop_registry() {
  [[ -n "$registry_pid" ]] || return 0
  kill -TERM "$registry_pid" 2>/dev/null || true
  wait "$registry_pid" 2>/dev/null || true
  registry_pid=""
}

# start_registry starts the test registries and exports the variables they
# print (CUBBY_TEST_IMAGE, CUBBY_TEST_AUTH_IMAGE, CUBBY_TEST_REGISTRY_USER,
# CUBBY_TEST_REGISTRY_PASSWORD, CUBBY_TEST_MIRROR).
start_registry() {
  local out="$(dirname "$server_log")/registry.env"
  rm -f "$out"
  log "starting the test registries (the first run makes a Debian image with mmdebstrap)"
  local bin="$repo/.cache/tools/testregistry"
  (cd "$repo" && go build -o "$bin" ./internal/testenv/testregistry/cmd/testregistry) || return 1
  (cd "$repo" && exec "$bin") >"$out" 2>"$out.log" &
  registry_pid=$!
  for _ in $(seq 1 900); do
    if grep -q '^CUBBY_TEST_MIRROR=' "$out" 2>/dev/null; then
      set -a
      # shellcheck disable=SC1090
      . "$out"
      set +a
      return 0
    fi
    if ! kill -0 "$registry_pid" 2>/dev/null; then
      log "the test registries failed:"; cat "$out.log" >&2; return 1
    fi
    sleep 1
  done
  log "the test registries did not start in 15 min"; return 1
}

stop_server() {
  [[ -n "$server_pid" ]] || return 0
  if kill -0 "$server_pid" 2>/dev/null; then
    log "stopping cubby (pid $server_pid)"
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$server_pid" 2>/dev/null; then
      log "cubby did not stop within 30 s; sending SIGKILL"
      kill -KILL "$server_pid" 2>/dev/null || true
    fi
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  # The server keeps its bridge and table for its sandboxes; remove them.
  "$cubby" network teardown --bridge "$bridge" >/dev/null 2>&1 ||
    { ip link del "$bridge" 2>/dev/null; nft delete table inet "cubby_$bridge" 2>/dev/null; } || true
}

show_server_log() {
  log "last 80 lines of $server_log:"
  tail -n 80 "$server_log" >&2 || true
}

lane_pids=()
cleanup() {
  for pid in "${lane_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  stop_server
  stop_registry
  if declare -F stop_internet >/dev/null; then stop_internet; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_health() { # wait_health URL SECONDS
  local url="$1" deadline=$((SECONDS + $2)) next_note=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      log "cubby exited before becoming healthy"
      return 1
    fi
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url" || true)" == "200" ]]; then
      return 0
    fi
    if ((SECONDS >= next_note)); then
      log "still waiting for $url ($((deadline - SECONDS)) s left)"
      next_note=$((SECONDS + 30))
    fi
    sleep 1
  done
  log "timed out after $2 s waiting for $url"
  return 1
}

cubby="${CUBBY_BIN:-$repo/bin/cubby}"
templates_dir="${CUBBY_TEMPLATES_DIR:-$repo/.cache/templates}"
if [[ "${CUBBY_COMPAT_SKIP_BUILD:-0}" != 1 ]]; then
  if [[ -z "${CUBBY_BIN:-}" ]]; then
    log "building bin/cubby"
    (cd "$repo" && make -s build)
  fi
  if ((${#js_suites[@]} + ${#py_suites[@]} > 0)) && [[ " ${js_suites[*]} ${py_suites[*]} " == *" ci-"* ]]; then
    log "building the code-interpreter template (cached unless its definition changed)"
    "$cubby" template build code-interpreter --templates-dir "$templates_dir" >&2
  fi
fi

mirror_args=()
if ((kind_core)); then
  start_registry
  mirror_args=(--registry-mirror "$CUBBY_TEST_MIRROR")
fi

port="${CUBBY_COMPAT_PORT:-$(free_port)}"
api_key="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
origin="http://127.0.0.1:$port"

# The test internet of the network suites: HTTP/HTTPS echo servers, DNS and a
# SOCKS5 proxy in a network namespace the host routes to (nothing leaves the
# machine). The server's egress proxy resolves through its DNS and trusts its
# CA; the suites read where things are from CUBBY_TEST_INTERNET.
internet_pid=""
start_internet() {
  local dir bin
  dir="$(dirname "$server_log")"
  bin="$dir/internet"
  (cd "$repo" && go build -o "$bin" ./test/compat/internet)
  export CUBBY_TEST_INTERNET="$dir/internet.json"
  rm -f "$CUBBY_TEST_INTERNET"
  "$bin" -dir "$dir" >"$CUBBY_TEST_INTERNET.tmp" &
  internet_pid=$!
  for _ in $(seq 1 100); do
    if [[ -s "$CUBBY_TEST_INTERNET.tmp" ]]; then break; fi
    kill -0 "$internet_pid" 2>/dev/null || { log "the test internet did not start"; return 1; }
    sleep 0.1
  done
  mv "$CUBBY_TEST_INTERNET.tmp" "$CUBBY_TEST_INTERNET"
  CUBBY_EGRESS_RESOLVER="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dns"])' "$CUBBY_TEST_INTERNET")"
  CUBBY_EGRESS_UPSTREAM_CA="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["caFile"])' "$CUBBY_TEST_INTERNET")"
  export CUBBY_EGRESS_RESOLVER CUBBY_EGRESS_UPSTREAM_CA
  log "test internet up (DNS $CUBBY_EGRESS_RESOLVER)"
}
stop_internet() {
  [[ -n "$internet_pid" ]] || return 0
  kill -TERM "$internet_pid" 2>/dev/null || true
  wait "$internet_pid" 2>/dev/null || true
  internet_pid=""
}
start_internet

log "starting cubby serve on $origin (data: $data_dir, log: $server_log)"
CUBBY_API_KEY="$api_key" "$cubby" serve --listen "127.0.0.1:$port" --data-dir "$data_dir" \
  --templates-dir "$templates_dir" "${mirror_args[@]}" --bridge "$bridge" --subnet "$subnet" \
  >"$server_log" 2>&1 &
server_pid=$!

# Install while the server starts: both take a while on a cold machine.
declare -A deps
for set in "${sdk_sets[@]}"; do
  for suite in "${js_suites[@]}"; do deps[$set/$suite]="$(deps_js "$set" "$suite")"; done
  for suite in "${py_suites[@]}"; do deps[$set/$suite]="$(deps_py "$set" "$suite")"; done
done

if ! wait_health "$origin/health" "$health_wait"; then
  show_server_log
  exit 1
fi
log "cubby is healthy"

export E2B_API_URL="$origin" E2B_SANDBOX_URL="$origin" E2B_VOLUME_API_URL="$origin" E2B_API_KEY="$api_key"
unset E2B_DEBUG E2B_DOMAIN
# For the tests of the server itself (a second server on this host).
export CUBBY_BIN="$cubby" CUBBY_TEMPLATES_DIR="$templates_dir" CUBBY_COMPAT_BRIDGE="$bridge" \
  CUBBY_COMPAT_SUBNET="$subnet" CUBBY_COMPAT_SERVER_PID="$server_pid"
export CUBBY_COMPAT_CONCURRENCY="$concurrency"

# sdk_version DEPS SUITE: the SDK versions a suite's dependencies resolve to.
sdk_version() {
  case "$2" in
    js) node -p "'e2b ' + require('$1/node_modules/e2b/package.json').version" ;;
    ci-js) node -p "'@e2b/code-interpreter ' + require('$1/node_modules/@e2b/code-interpreter/package.json').version" ;;
    python) "$1/bin/python" -c 'from importlib.metadata import version as v; print("e2b", v("e2b"))' ;;
    ci-python) "$1/bin/python" -c 'from importlib.metadata import version as v; print("e2b-code-interpreter", v("e2b-code-interpreter"), "/ e2b", v("e2b"))' ;;
  esac
}

# counts SUITE OUTPUT: "passed failed skipped" from a node --test or pytest run.
counts() {
  if [[ "$1" == *js ]]; then
    awk '/^# pass /{p+=$3} /^# fail /{f+=$3} /^# cancelled /{f+=$3} /^# skipped /{s+=$3} END{print p+0, f+0, s+0}' "$2"
  else
    python3 - "$2" <<'PY'
import re, sys
tail = open(sys.argv[1], errors="replace").read().splitlines()[-5:]
n = {k: 0 for k in ("passed", "failed", "skipped", "error", "errors")}
for line in tail:
    for num, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", line):
        n[kind] = int(num)
print(n["passed"], n["failed"] + n["error"] + n["errors"], n["skipped"])
PY
  fi
}

# run_suite SET SUITE: runs one suite of one set in its own work dir (the test
# files next to the set's dependencies), then its leak check; appends a result
# line to the lane's result file. A failure returns 1.
run_suite() {
  local set="$1" suite="$2" dir="$work/run/$set/$2" dep="${deps[$1/$2]}" out rc=0
  out="$work/results/$set-$suite.log"
  rm -rf "$dir" && mkdir -p "$dir"
  if [[ "$suite" == *js ]]; then
    cp "$here/$suite"/*.mjs "$dir/"
    cp "$here/scan.py" "$dir/.."
    ln -s "$dep/node_modules" "$dir/node_modules"
    # Template builds take minutes each (every test there sets its own timeout):
    # that file runs beside the others, without the per-file limit of 180 s.
    local builds=() others=()
    rm -f "$out.builds" "$out.builds.rc"
    for f in "$dir"/*.test.mjs; do [[ "$(basename "$f")" == template*.test.mjs ]] && builds+=("$f") || others+=("$f"); done
    (cd "$dir" && node --test --test-concurrency="$concurrency" --test-timeout=180000 "${others[@]}") >"$out" 2>&1 &
    local pid_others=$!
    if ((${#builds[@]})); then
      (cd "$dir" && node --test "${builds[@]}") >"$out.builds" 2>&1 || echo 1 >"$out.builds.rc"
    fi
    wait "$pid_others" || rc=1
    if [[ -f "$out.builds" ]]; then cat "$out.builds" >>"$out" && rm -f "$out.builds"; fi
    if [[ -f "$out.builds.rc" ]]; then rc=1 && rm -f "$out.builds.rc"; fi
    (cd "$dir" && node leaks.mjs) >>"$out" 2>&1 || { rc=1; echo "LEAKED SANDBOXES" >>"$out"; }
  else
    (cd "$here/$suite" && "$dep/bin/python" -m pytest -p no:cacheprovider -n "$concurrency" --dist load) >"$out" 2>&1 || rc=1
    (cd "$here/$suite" && "$dep/bin/python" leaks.py) >>"$out" 2>&1 || { rc=1; echo "LEAKED SANDBOXES" >>"$out"; }
  fi
  read -r pass fail skip < <(counts "$suite" "$out")
  printf '%-10s %-7s %-48s %4s passed %3s failed %3s skipped  %s\n' "$suite" "$set" "$(sdk_version "$dep" "$suite")" \
    "$pass" "$fail" "$skip" "$([[ $rc == 0 ]] && echo ok || echo "FAILED (see $out)")" >>"$work/results/summary"
  return "$rc"
}

# lane SUITE...: runs each suite for every set, skipping a set whose
# dependencies are those of a set already run.
lane() {
  local rc=0 suite set
  for suite in "$@"; do
    declare -A seen=()
    for set in "${sdk_sets[@]}"; do
      if [[ -n "${seen[${deps[$set/$suite]}]:-}" ]]; then
        printf '%-10s %-7s %-48s same packages as set %s: not run again\n' "$suite" "$set" \
          "$(sdk_version "${deps[$set/$suite]}" "$suite")" "${seen[${deps[$set/$suite]}]}" >>"$work/results/summary"
        continue
      fi
      seen[${deps[$set/$suite]}]="$set"
      log "running $suite against SDK set $set"
      run_suite "$set" "$suite" || rc=1
    done
  done
  return "$rc"
}

: >"$work/results/summary"
status=0
if ((${#js_suites[@]} > 0)); then lane "${js_suites[@]}" & lane_pids+=($!); fi
if ((${#py_suites[@]} > 0)); then lane "${py_suites[@]}" & lane_pids+=($!); fi
for pid in "${lane_pids[@]}"; do
  wait "$pid" || status=1
done
lane_pids=()

log "results:"
sort "$work/results/summary" >&2
if ! kill -0 "$server_pid" 2>/dev/null; then
  log "cubby died during the run"
  status=1
fi
if ((status != 0)); then
  for f in "$work"/results/*.log; do
    grep -q -E '^not ok|FAILED|ERROR|LEAKED' "$f" 2>/dev/null && { log "failures in $f:"; grep -E '^not ok|FAILED|ERROR|LEAKED' "$f" | head -40 >&2; }
  done
  show_server_log
fi
stop_server
stop_registry
exit "$status"
