#!/usr/bin/env bash
# install-deps.sh PKG... — install the Debian packages among PKG that are not installed yet.
# Idempotent and fast when everything is present; runs `apt-get update` at most once per call,
# and only when a package is missing (or apt has no lists yet). Non-interactive.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: $0 PKG..." >&2
	exit 2
fi

missing=()
for pkg in "$@"; do
	# dpkg-query prints "install ok installed" only for a fully installed package.
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
		missing+=("$pkg")
	fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: need root to install: ${missing[*]}" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}" >&2
# Without package lists (fresh machine) or with stale ones, install fails: update once first.
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
