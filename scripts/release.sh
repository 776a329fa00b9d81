#!/usr/bin/env bash
# release.sh VERSION: tag a release of dlock's three published modules, in
# the order the go command needs, on the current branch. Nothing is pushed;
# the push command is printed at the end.
#
#   1. tag VERSION (the main module, github.com/dlock-go/dlock) at HEAD;
#   2. driver/etcd/go.mod requires github.com/dlock-go/dlock VERSION, go.sum
#      follows; commit, tag driver/etcd/VERSION;
#   3. cmd/dlock/go.mod requires both at VERSION, go.sum follows; commit,
#      tag cmd/dlock/VERSION;
#   4. go install github.com/dlock-go/dlock/cmd/dlock@VERSION outside the
#      clone, and dlock help must list etcd.
#
# go.sum is filled outside the workspace (GOWORK=off), from a module proxy
# of files made of the new tags (harness/cmd/modproxy), ahead of the usual
# proxy for the other modules, with a module cache of its own: what users
# will download once the tags are pushed. It refuses a bad VERSION, a
# working tree with changes, and tags that exist; on failure it deletes its
# tags and resets the branch to where it started.
set -euo pipefail

die() { echo "release: $*" >&2; exit 1; }

version=${1:-}
[ $# -eq 1 ] && [ -n "$version" ] || die "usage: scripts/release.sh vX.Y.Z (make release VERSION=vX.Y.Z)"
# Semantic version; major 0 or 1: v2 and up need a /v2 module path.
semver='^v(0|1)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
[[ $version =~ $semver ]] || die "bad version $version: want vX.Y.Z or vX.Y.Z-PRERELEASE with X 0 or 1 (v2 and up need a /v2 module path)"

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
GO=${GO:-go}
[ -z "$(git status --porcelain --untracked-files=normal)" ] || die "the working tree has changes; commit or stash them first:
$(git status --short)"
for t in "$version" "driver/etcd/$version" "cmd/dlock/$version"; do
	if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then die "tag $t exists"; fi
done
for m in . driver/etcd cmd/dlock; do
	if grep -q '^replace' "$m/go.mod"; then die "$m/go.mod has a replace directive: go install ...@$version would refuse it"; fi
done

main=github.com/dlock-go/dlock
branch=$(git symbolic-ref -q --short HEAD || echo HEAD)
start=$(git rev-parse HEAD)
tmp=$(mktemp -d)
tags=()
cleanup() {
	status=$?
	if [ $status -ne 0 ]; then
		echo "release: failed; deleting tags ${tags[*]:-(none)} and resetting $branch to $start" >&2
		for t in "${tags[@]}"; do git tag -d "$t" >/dev/null; done
		git reset -q --hard "$start"
	fi
	rm -rf "$tmp"
	exit $status
}
trap cleanup EXIT

# The proxy tool, built in the workspace (harness/ is not published).
(cd harness && $GO build -o "$tmp/modproxy" ./cmd/modproxy)

# outside runs the go command as a user would, in a module of this clone
# without the workspace: dlock's modules come from the proxy of the new
# tags, the others from the module cache's downloads or the usual proxy.
cache=$($GO env GOMODCACHE)
upstream=$($GO env GOPROXY)
# DLOCK_RELEASE_GOMODCACHE names the module cache to use instead of a
# fresh one (the packaging test's).
modcache=${DLOCK_RELEASE_GOMODCACHE:-$tmp/modcache}
outside() {
	GOWORK=off GOFLAGS="-modcacherw ${outside_flags--mod=mod}" GOTOOLCHAIN=local \
		GOPROXY="file://$tmp/proxy,file://$cache/cache/download,$upstream" \
		GONOSUMDB=github.com/dlock-go GOMODCACHE="$modcache" \
		"$GO" "$@"
}

tag() {
	git tag -a "$1" -m "dlock $1" && tags+=("$1")
	echo "release: tagged $1 at $(git rev-parse --short HEAD)"
}

# 1. The main module.
tag "$version"
"$tmp/modproxy" -dir "$tmp/proxy" -repo . -module "$main" -version "$version"

# 2. etcd's driver, on the main module's release.
(cd driver/etcd && $GO mod edit -require="$main@$version" && outside mod tidy)
git add driver/etcd/go.mod driver/etcd/go.sum
git commit -q -m "driver/etcd: require dlock $version" -m "The release $version of the etcd driver's module builds on the main module's."
tag "driver/etcd/$version"
"$tmp/modproxy" -dir "$tmp/proxy" -repo . -module "$main/driver/etcd" -subdir driver/etcd -version "$version"

# 3. The command, on both.
(cd cmd/dlock && $GO mod edit -require="$main@$version" -require="$main/driver/etcd@$version" && outside mod tidy)
git add cmd/dlock/go.mod cmd/dlock/go.sum
git commit -q -m "cmd/dlock: require dlock and its etcd driver $version" -m "The release $version of the dlock command builds on the modules' releases."
tag "cmd/dlock/$version"
"$tmp/modproxy" -dir "$tmp/proxy" -repo . -module "$main/cmd/dlock" -subdir cmd/dlock -version "$version"

# 4. What users will run.
(cd "$tmp" && GOBIN="$tmp/bin" outside_flags= outside install "$main/cmd/dlock@$version")
"$tmp/bin/dlock" help | grep -q '^Backends compiled in: .*\betcd\b' || die "the installed dlock has no etcd backend"
echo "release: go install $main/cmd/dlock@$version works: $("$tmp/bin/dlock" version)"

echo
echo "release: $version is tagged (${tags[*]}); nothing was pushed. To publish:"
echo "  git push origin $branch ${tags[*]}"
