#!/usr/bin/env bash
# Renders deploy/ (the kustomize install) from charts/evictiond: `helm template` with the
# chart's default values, the release "evictiond" in namespace evictiond-system, and
# namespace.create=true (kustomize users get the Namespace with its pod security label).
# deploy/ is generated: edit the chart, then `make render-deploy`.
#
#   hack/render-deploy.sh          rewrite deploy/
#   hack/render-deploy.sh --check  fail, with the diff, when deploy/ differs from the render
#
#   HELM             the helm binary (default: built and cached by hack/helm.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM="${HELM:-$("$ROOT/hack/helm.sh")}"
RELEASE=evictiond
NAMESPACE=evictiond-system
# deploy/'s files in kustomization order (the Namespace first); any other template the
# defaults render follows, sorted.
ORDER=(namespace.yaml rbac.yaml admission-policy.yaml eviction-webhook.yaml flowcontrol.yaml configmap.yaml daemonset.yaml)

check=false
case "${1:-}" in
	--check) check=true ;;
	"") ;;
	*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$HELM" template "$RELEASE" "$ROOT/charts/evictiond" --namespace "$NAMESPACE" \
	--set namespace.create=true --skip-tests --output-dir "$work/helm" >/dev/null
rendered="$work/helm/evictiond/templates"
out="$work/deploy"
mkdir -p "$out"

files=()
for f in "${ORDER[@]}"; do
	[[ -f "$rendered/$f" ]] && files+=("$f")
done
for path in "$rendered"/*.yaml; do
	f="$(basename "$path")"
	[[ " ${ORDER[*]} " == *" $f "* ]] || files+=("$f")
done
for f in "${files[@]}"; do
	{
		echo "# Rendered from charts/evictiond by \`make render-deploy\`: edit the chart, not this file."
		cat "$rendered/$f"
	} >"$out/$f"
done
{
	echo "# Rendered from charts/evictiond by \`make render-deploy\`: edit the chart, not this file."
	echo "# kubectl apply -k deploy/ installs what \`helm install evictiond charts/evictiond\` does,"
	echo "# with the chart's default values (docs/install.md)."
	echo "apiVersion: kustomize.config.k8s.io/v1beta1"
	echo "kind: Kustomization"
	echo "namespace: $NAMESPACE"
	echo "resources:"
	for f in "${files[@]}"; do echo "  - $f"; done
} >"$out/kustomization.yaml"

if $check; then
	if ! diff -ru "$ROOT/deploy" "$out"; then
		echo "deploy/ differs from charts/evictiond rendered with its defaults (diff above: - deploy/, + render)." >&2
		echo "deploy/ is generated: change the chart, then run \`make render-deploy\` and commit both." >&2
		exit 1
	fi
	echo "deploy/ matches charts/evictiond rendered with its defaults"
	exit 0
fi
rm -f "$ROOT"/deploy/*.yaml
cp "$out"/*.yaml "$ROOT/deploy/"
echo "deploy/ rendered from charts/evictiond: ${files[*]} kustomization.yaml"
