#!/usr/bin/env bash
# Runs the E2B SDK compatibility suites (official JS and Python SDKs,
# unmodified) against a freshly started Cubby server: the core SDK suites
# (js/, python/: e2b) and the code-interpreter suites (ci-js/, ci-python/:
# @e2b/code-interpreter and e2b-code-interpreter, template code-interpreter).
#
#   test/compat/run.sh [--js-only | --py-only] [--ci-only | --core-only]
#
# --js-only / --py-only pick the language, --ci-only / --core-only the kind of
# suite; the default runs all four.
#
# Steps: build bin/cubby (and, for the code-interpreter suites, the
# code-interpreter template; cached), start the test internet the network
# tests use (test/compat/internet: echo servers, DNS and a SOCKS5 proxy in a
# network namespace; CUBBY_TEST_INTERNET names its JSON description), start
# the test registries the Template suites pull base images from
# (internal/registrytest/cmd/testregistry: a minimal Debian image, anonymous
# and behind a password; the anonymous one is the server's Docker Hub
# mirror), start `cubby serve` on a free loopback port with a generated API
# key and its egress proxy pointed at that internet, wait for GET /health (up
# to 20 min: the first start builds the base template), install the suites'
# dependencies (idempotent), run the suites, stop the server, the registries
# and the test internet. Exits
# non-zero if anything fails.
#
# Environment knobs:
#   CUBBY_DATA_DIR            server data dir (default: <repo>/.cache/compat-data)
#   CUBBY_COMPAT_PORT         listen port (default: a free port)
#   CUBBY_COMPAT_LOG          server log file (default: <repo>/.cache/compat/server.log)
#   CUBBY_COMPAT_CONCURRENCY  parallel tests per suite (default: 4)
#   CUBBY_COMPAT_HEALTH_WAIT  seconds to wait for /health (default: 1200)
#   CUBBY_COMPAT_SKIP_BUILD=1 use an existing bin/cubby (and built templates)
#   CUBBY_BIN                 the cubby binary to run (default: <repo>/bin/cubby)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

lang_js=1
lang_py=1
kind_core=1
kind_ci=1
for arg in "$@"; do
  case "$arg" in
    --js-only) lang_py=0 ;;
    --py-only) lang_js=0 ;;
    --ci-only) kind_core=0 ;;
    --core-only) kind_ci=0 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option: $arg" >&2; exit 2 ;;
  esac
done
if [[ $lang_js == 0 && $lang_py == 0 ]]; then
  echo "run.sh: --js-only and --py-only are mutually exclusive" >&2
  exit 2
fi
if [[ $kind_core == 0 && $kind_ci == 0 ]]; then
  echo "run.sh: --ci-only and --core-only are mutually exclusive" >&2
  exit 2
fi
run_js=$((lang_js && kind_core))
run_py=$((lang_py && kind_core))
run_ci_js=$((lang_js && kind_ci))
run_ci_py=$((lang_py && kind_ci))

log() { printf '[compat] %s\n' "$*" >&2; }

concurrency="${CUBBY_COMPAT_CONCURRENCY:-4}"
health_wait="${CUBBY_COMPAT_HEALTH_WAIT:-1200}"
data_dir="${CUBBY_DATA_DIR:-$repo/.cache/compat-data}"
server_log="${CUBBY_COMPAT_LOG:-$repo/.cache/compat/server.log}"
mkdir -p "$data_dir" "$(dirname "$server_log")"

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="$PATH:/usr/local/go/bin"
fi

# ---------------------------------------------------------------- dependencies

stamp_ok() { # stamp_ok STAMPFILE INPUTFILE...: true if inputs are unchanged
  local stamp="$1"; shift
  [[ -f "$stamp" ]] && [[ "$(cat "$@" | sha256sum)" == "$(cat "$stamp")" ]]
}
stamp_write() { local stamp="$1"; shift; cat "$@" | sha256sum >"$stamp"; }

install_js() { # install_js [DIR]: npm ci in DIR (default js/) when its lockfile changed
  local dir="${1:-$here/js}"
  if stamp_ok "$dir/node_modules/.cubby-stamp" "$dir/package.json" "$dir/package-lock.json"; then
    return
  fi
  log "installing JS dependencies (npm ci)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  stamp_write "$dir/node_modules/.cubby-stamp" "$dir/package.json" "$dir/package-lock.json"
}

install_py() { # install_py [DIR]: venv + pip in DIR (default python/) when requirements changed
  local dir="${1:-$here/python}"
  if [[ ! -x "$dir/.venv/bin/python" ]]; then
    log "creating Python venv"
    python3 -m venv "$dir/.venv"
  fi
  if stamp_ok "$dir/.venv/.cubby-stamp" "$dir/requirements.txt"; then
    return
  fi
  log "installing Python dependencies (pip)"
  "$dir/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
  stamp_write "$dir/.venv/.cubby-stamp" "$dir/requirements.txt"
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
  (cd "$repo" && go build -o "$bin" ./internal/registrytest/cmd/testregistry) || return 1
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
}

show_server_log() {
  log "last 80 lines of $server_log:"
  tail -n 80 "$server_log" >&2 || true
}

trap 'stop_server; stop_registry' EXIT
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
  if ((run_ci_js || run_ci_py)); then
    log "building the code-interpreter template (cached unless its definition changed)"
    "$cubby" template build code-interpreter --templates-dir "$templates_dir" >&2
  fi
fi

mirror_args=()
if ((run_js || run_py)); then
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
trap 'stop_server; stop_registry; stop_internet' EXIT
start_internet

# Install while the server starts: both take a while on a cold machine.
log "starting cubby serve on $origin (data: $data_dir, log: $server_log)"
CUBBY_API_KEY="$api_key" "$cubby" serve --listen "127.0.0.1:$port" --data-dir "$data_dir" \
  --templates-dir "$templates_dir" "${mirror_args[@]}" \
  --bridge "${CUBBY_COMPAT_BRIDGE:-cbcompat0}" --subnet "${CUBBY_COMPAT_SUBNET:-10.79.0.0/20}" \
  >"$server_log" 2>&1 &
server_pid=$!

if ((run_js)); then install_js; fi
if ((run_py)); then install_py; fi
if ((run_ci_js)); then install_js "$here/ci-js"; fi
if ((run_ci_py)); then install_py "$here/ci-python"; fi

if ! wait_health "$origin/health" "$health_wait"; then
  show_server_log
  exit 1
fi
log "cubby is healthy"

export E2B_API_URL="$origin" E2B_SANDBOX_URL="$origin" E2B_VOLUME_API_URL="$origin" E2B_API_KEY="$api_key"
unset E2B_DEBUG E2B_DOMAIN
export CUBBY_COMPAT_CONCURRENCY="$concurrency"

status=0
# run_suite LABEL DIR COMMAND: runs one suite's COMMAND (a shell string, expanded in
# DIR), then its leak check (leaks.mjs or leaks.py next to it); a failure sets status=1.
run_suite() {
  local label="$1" dir="$2" cmd="$3"
  log "running the $label"
  if ! (cd "$dir" && eval "$cmd"); then
    status=1
    log "$label FAILED"
  fi
  local leaks=(node leaks.mjs)
  [[ -f "$dir/leaks.py" ]] && leaks=(.venv/bin/python leaks.py)
  if ! (cd "$dir" && "${leaks[@]}"); then
    status=1
    log "$label left sandboxes running"
  fi
}
node_tests="node --test --test-concurrency=$concurrency --test-timeout=180000 ./*.test.mjs"
pytest=".venv/bin/python -m pytest -n $concurrency --dist load"
if ((run_js)); then
  run_suite "JS suite (e2b $(cd "$here/js" && node -p 'require("./node_modules/e2b/package.json").version'))" \
    "$here/js" "$node_tests"
fi
if ((run_py)); then
  run_suite "Python suite" "$here/python" "$pytest"
fi
if ((run_ci_js)); then
  run_suite "code-interpreter JS suite (@e2b/code-interpreter $(cd "$here/ci-js" && node -p 'require("./node_modules/@e2b/code-interpreter/package.json").version'))" \
    "$here/ci-js" "$node_tests"
fi
if ((run_ci_py)); then
  run_suite "code-interpreter Python suite" "$here/ci-python" "$pytest"
fi

if ! kill -0 "$server_pid" 2>/dev/null; then
  log "cubby died during the run"
  status=1
fi
if ((status != 0)); then
  show_server_log
fi
stop_server
stop_registry
exit "$status"
