#!/usr/bin/env bash
# merge-gomod.sh: resolve a git merge conflict in go.mod/go.sum by taking the
# union of both sides' requirements (MVS then keeps the higher version) and
# re-tidying. Used when merging work branches; run it with the merge stopped.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
stage() { git show ":$1:$2" 2>/dev/null || cat "$2"; } # conflict stage, or the merged file
ours=$(mktemp); theirs=$(mktemp)
trap 'rm -f "$ours" "$theirs"' EXIT
stage 2 go.mod >"$ours"; stage 3 go.mod >"$theirs"
sums=$( { stage 2 go.sum; stage 3 go.sum; } | sort -u)
cp "$ours" go.mod
# Every requirement of theirs, single-line or in a block.
sed -nE 's/^(require[[:space:]]+)?[[:space:]]*([a-z0-9.-]+\.[a-z]+\/[^[:space:]]+) (v[^[:space:]]+).*/\2@\3/p' "$theirs" |
	while read -r req; do go mod edit -require="$req"; done
printf '%s\n' "$sums" >go.sum
go mod tidy
git add go.mod go.sum
