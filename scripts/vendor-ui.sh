#!/usr/bin/env bash
# vendor-ui.sh: refresh the front-end libraries the coordinator embeds, from
# npm, at pinned versions checked by sha256. Nothing is loaded from a CDN at
# run time; the built files are committed. Needs npm and network access to
# the npm registry. Usage: bash scripts/vendor-ui.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name version sha256-of-tarball
fetch() {
	local name=$1 version=$2 sum=$3
	(cd "$tmp" && npm pack --silent "$name@$version" >/dev/null)
	local tgz
	tgz=$(ls "$tmp"/*"$version".tgz)
	echo "$sum  $tgz" | sha256sum -c --quiet - || { echo "vendor-ui: $name@$version tarball does not match its pinned sha256" >&2; exit 1; }
	mkdir -p "$tmp/$name" && tar -xzf "$tgz" -C "$tmp/$name" && rm "$tgz"
}

fetch swagger-ui-dist 5.35.0 1b8e891893404ea4c3558b6a87e2a3e494e7eedba41168c2ece5800a391a6ea6
d=dashboard/apidocs/assets
p=$tmp/swagger-ui-dist/package
cp "$p/swagger-ui-bundle.js" "$p/swagger-ui-bundle.js.LICENSE.txt" "$p/swagger-ui.css" "$d/"
cp "$p/LICENSE" "$d/LICENSE.txt"
cp "$p/NOTICE" "$d/NOTICE.txt"

fetch uplot 1.6.32 4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d
d=dashboard/static/vendor
p=$tmp/uplot/package
cp "$p/dist/uPlot.iife.min.js" "$p/dist/uPlot.min.css" "$d/"
cp "$p/LICENSE" "$d/uPlot.LICENSE.txt"

echo "vendor-ui: done; review 'git diff --stat' and run 'go test ./dashboard/...'"
