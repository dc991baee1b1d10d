#!/usr/bin/env bash
# Builds the cubby binary of an earlier commit of this repository, for the
# upgrade test (test/integration/upgrade_test.go), once per commit:
#
#   scripts/build-baseline.sh COMMIT OUT
#
# The commit's tree is exported with git archive (no work tree is touched)
# and built as `make build` builds bin/cubby. When the clone does not hold
# the commit (a shallow clone) it says so and builds nothing; the upgrade
# test then skips with that reason.
set -euo pipefail
commit="$1" out="$2"
[[ -x "$out" ]] && exit 0
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "baseline: commit $commit is not in this clone's history; the upgrade test will skip" >&2
  exit 0
fi
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
git archive "$commit" | tar -x -C "$src"
mkdir -p "$(dirname "$out")"
(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" ./cmd/cubby)
mv "$out.tmp" "$out"
echo "baseline: built $commit into $out"
