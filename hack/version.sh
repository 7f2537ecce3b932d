#!/bin/sh
# The version every artifact of a build carries (the binary's `evictiond version`, the image's
# tag and org.opencontainers.image.version label, the packaged chart's version and appVersion),
# from git: the nearest v* tag as `git describe` says it (v0.2.0, v0.2.0-3-g1a2b3c4, -dirty
# when the tree has changes), or v0.0.0-g<commit> before the first tag. Always SemVer, so the
# chart version is the same string without its v. Outside a git checkout: v0.0.0-dev.
set -eu
cd "$(dirname "$0")/.."
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
	echo "$v"
elif c=$(git rev-parse --short=12 HEAD 2>/dev/null); then
	dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | head -n1)
	echo "v0.0.0-g$c${dirty:+-dirty}"
else
	echo v0.0.0-dev
fi
