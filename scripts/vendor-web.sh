#!/usr/bin/env bash
# Vendors the dashboard's third-party browser code into
# internal/dashboard/web/static/vendor (committed, embedded in the binary, so
# `cubby serve` loads nothing from elsewhere at run time): xterm.js and its
# fit add-on from the npm registry, pinned by version and checked against the
# sha512 integrity below (the one npm's registry publishes for that version).
# Run from anywhere (go generate ./internal/dashboard, or make web).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo/internal/dashboard/web/static/vendor"

# name version sha512-integrity files-to-copy (paths inside the package)
packages=(
  "@xterm/xterm 6.0.0 sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg== lib/xterm.js css/xterm.css LICENSE"
  "@xterm/addon-fit 0.11.0 sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g== lib/addon-fit.js LICENSE"
)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$dest"
mkdir -p "$dest"
for spec in "${packages[@]}"; do
  read -r name version integrity files <<<"$spec"
  tgz="$(cd "$tmp" && npm pack --silent "$name@$version" 2>/dev/null | tail -n1)"
  got="sha512-$(openssl dgst -sha512 -binary "$tmp/$tgz" | base64 -w0)"
  if [[ "$got" != "$integrity" ]]; then
    echo "vendor-web: $name@$version: integrity $got, want $integrity" >&2
    exit 1
  fi
  short="${name#@xterm/}"
  mkdir -p "$tmp/$short" "$dest/$short"
  tar -xzf "$tmp/$tgz" -C "$tmp/$short"
  for f in $files; do
    base="$(basename "$f")"
    # Source maps are not shipped: drop the comment pointing at them.
    sed '/^\/\/# sourceMappingURL=/d' "$tmp/$short/package/$f" >"$dest/$short/$base"
  done
  echo "$name@$version $integrity" >>"$dest/VERSIONS"
done
echo "vendored into $dest:"
(cd "$dest" && find . -type f | sort)
