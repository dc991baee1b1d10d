#!/usr/bin/env bash
# Installs the host packages Cubby needs on Debian bookworm (idempotent):
# gcc, pkg-config and libseccomp-dev (to build the pinned runc, `make runc`; the
# distribution's runc lacks the 2025 escape fixes), mmdebstrap (template builds),
# nftables, e2fsprogs (sandbox disks), busybox-static (test rootfs trees), plus
# Node.js/npm and Python for the official SDK suites when they are missing. With
# --test it also installs what the Go tests of the kernel manager drive on the
# host: ipykernel, matplotlib, pandas, IRkernel and Deno's Jupyter kernel;
# Debian's chromium, which the dashboard tests drive headless; python3-venv for
# the MCP Python client check (test/mcp/python makes its own venv from its
# requirements.txt); iproute2 (ss: the egress security tests list the egress
# proxy's sockets); and what the cluster tests need: PostgreSQL, containerd
# (whose node runs sandboxes with the pinned bin/runc) and the CNI plugins.
set -euo pipefail
pkgs=(gcc pkg-config libseccomp-dev mmdebstrap nftables e2fsprogs busybox-static ca-certificates curl)
if [ "${1:-}" = --test ]; then
  pkgs+=(python3-ipykernel python3-matplotlib python3-pandas python3-pytest python3-pil r-cran-irkernel chromium python3-venv iproute2)
  # The cluster tests: PostgreSQL (initdb'd into temp dirs by the tests) and a
  # real Kubernetes node's runtime (containerd, the CNI plugins).
  pkgs+=(postgresql containerd containernetworking-plugins)
fi
need=()
for pkg in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
command -v node >/dev/null || need+=(nodejs npm)
command -v python3 >/dev/null || need+=(python3 python3-venv python3-pip)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "${1:-}" = --test ] && ! command -v deno >/dev/null; then
  echo "installing deno (npm)"
  npm install -g --silent --no-audit --no-fund deno >/dev/null
fi
command -v go >/dev/null || { echo "Go 1.26+ is required (https://go.dev/dl)"; exit 1; }
