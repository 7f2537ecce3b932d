# Sourced by hack/helm.sh and hack/prometheus.sh: build a tool from the Go module proxy
# (a tools module under hack/tools) into a cache directory keyed by the module's version,
# only when missing, and print the binary's path.
#
#   go_tool NAME TOOLS_DIR MODULE PACKAGE [go build flags...]
#
# The version is MODULE's requirement in TOOLS_DIR/go.mod; the binary lands in
# ${EVICTIOND_CACHE:-/var/cache/evictiond}/NAME/VERSION/bin/NAME. "{VERSION}" in a build flag
# is replaced by the version.
go_tool() {
	local name="$1" tools_dir="$2" module="$3" pkg="$4"
	shift 4
	local cache="${EVICTIOND_CACHE:-/var/cache/evictiond}"
	local version
	version="$(awk -v m="$module" '$1 == m {print $2} $1 == "require" && $2 == m {print $3}' "$tools_dir/go.mod" | head -1)"
	if [[ -z "$version" ]]; then
		echo "$name: no $module requirement in $tools_dir/go.mod" >&2
		return 1
	fi
	local bin_dir="$cache/$name/$version/bin"
	local bin="$bin_dir/$name"
	if [[ ! -x "$bin" ]]; then
		mkdir -p "$bin_dir"
		# Build to a temp name in the same directory and rename: never a half-written binary.
		local tmp
		tmp="$(mktemp "$bin_dir/.build.XXXXXX")"
		local args=()
		for a in "$@"; do args+=("${a//\{VERSION\}/$version}"); done
		echo "$name: building $module $version (slow on a cold cache)" >&2
		if ! (cd "$tools_dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath "${args[@]}" -o "$tmp" "$pkg") >&2; then
			rm -f "$tmp"
			return 1
		fi
		mv "$tmp" "$bin"
	fi
	echo "$bin"
}
