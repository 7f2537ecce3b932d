#!/usr/bin/env bash
# merge-gomod.sh: resolve a git merge conflict in go.mod/go.sum by taking the
# union of both sides' requirements (the higher version wins through
# `go mod tidy`/MVS) and re-tidying. Used when merging work branches.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ours=$(mktemp); theirs=$(mktemp)
git show :2:go.mod >"$ours"; git show :3:go.mod >"$theirs"
cp "$ours" go.mod
# Add every requirement of theirs; go get would resolve, but plain edits keep it offline-fast.
grep -E '^\s+[a-z0-9.-]+\.[a-z]+/\S+ v\S+' "$theirs" | awk '{print $1"@"$2}' | while read -r req; do
	go mod edit -require="$req"
done
{ git show :2:go.sum; git show :3:go.sum; } | sort -u >go.sum
go mod tidy
git add go.mod go.sum
rm -f "$ours" "$theirs"
