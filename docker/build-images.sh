#!/usr/bin/env bash
# Builds the backend images the docker provider and docker-compose.yml use,
# offline, from the Debian packages installed on this machine: no registry,
# no network, no Dockerfile. For each image it
#
#   1. takes the server packages (redis-server, memcached, ZooKeeper's jars
#      and a headless JRE) and the closure of their Depends/Pre-Depends over
#      the installed packages,
#   2. stages every file those packages own (dpkg -L; docs, man pages and
#      locales left out) into an empty root, as a merged-/usr Debian root,
#   3. adds what maintainer scripts would have made (users, /tmp, the
#      ld.so cache, the java alternative) and
#   4. `docker import`s that root with the official image's tag, command,
#      working directory and a label saying where it came from.
#
# Usage: docker/build-images.sh [redis] [memcached] [zookeeper] [postgres] [etcd]   (default: all)
#
# Tags: redis:7.0, memcached:1.6, zookeeper:3.8, postgres:15, etcd:3.4 (the
# provider's defaults), or DLOCK_REDIS_IMAGE, DLOCK_MEMCACHED_IMAGE,
# DLOCK_ZOOKEEPER_IMAGE, DLOCK_POSTGRES_IMAGE, DLOCK_ETCD_IMAGE. A tag that
# holds an image this script did not build (e.g. a pulled official image) is
# left alone unless FORCE=1. An image built from the same package versions
# is kept as it is (REBUILD=1 rebuilds it).
#
# Needs: dpkg (a Debian or Ubuntu host with the packages installed: `make
# servers` installs them), tar, and a Docker engine. Run as root for the
# ld.so cache (ldconfig -r); without root the image still works, the loader
# then searches the standard directories.
set -euo pipefail

label_src=org.dlock.image.source
label_pkgs=org.dlock.image.packages

redis_tag=${DLOCK_REDIS_IMAGE:-redis:7.0}
memcached_tag=${DLOCK_MEMCACHED_IMAGE:-memcached:1.6}
zookeeper_tag=${DLOCK_ZOOKEEPER_IMAGE:-zookeeper:3.8}
postgres_tag=${DLOCK_POSTGRES_IMAGE:-postgres:15}
etcd_tag=${DLOCK_ETCD_IMAGE:-etcd:3.4}

jvm=/usr/lib/jvm/java-17-openjdk-amd64

die() { echo "build-images: $*" >&2; exit 1; }
log() { echo "build-images: $*" >&2; }

command -v dpkg-query >/dev/null || die "no dpkg: this script stages Debian packages; on other systems pull the official images (docker pull $redis_tag $memcached_tag $zookeeper_tag $postgres_tag)"
command -v docker >/dev/null || die "no docker CLI"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"

# --- package closure ---------------------------------------------------------

# provider[name] = installed package that is or provides name.
declare -A provider
load_providers() {
	local st pkg provides v
	while IFS=$'\t' read -r st pkg provides; do
		[ "$st" = "ii " ] || continue
		provider[$pkg]=$pkg
		IFS=',' read -ra vs <<<"$provides"
		for v in "${vs[@]}"; do
			v=${v%%(*}; v=${v// /}
			[ -n "$v" ] && [ -z "${provider[$v]:-}" ] && provider[$v]=$pkg
		done
	done < <(dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Provides}\n')
}

# skip[name]: packages closure leaves out, with what only they bring
# (set per image: what its server does not need at run time).
declare -A skip=()

# closure pkg...: the installed packages reachable through Depends and
# Pre-Depends (first installed alternative of each "a | b"), one per line.
closure() {
	local -A seen=()
	local queue=("$@") p deps g a
	while [ ${#queue[@]} -gt 0 ]; do
		p=${queue[0]}; queue=("${queue[@]:1}")
		[ -n "${seen[$p]:-}" ] && continue
		[ -n "${skip[$p]:-}" ] && continue
		seen[$p]=1
		echo "$p"
		deps=$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$p")
		IFS=',' read -ra groups <<<"$deps"
		for g in "${groups[@]}"; do
			IFS='|' read -ra alts <<<"$g"
			for a in "${alts[@]}"; do
				a=${a%%(*}; a=${a%%:*}; a=${a// /}
				[ -z "$a" ] && continue
				if [ -n "${provider[$a]:-}" ]; then queue+=("${provider[$a]}"); break; fi
			done
		done
	done
}

require_installed() {
	local p missing=()
	for p in "$@"; do
		[ -n "${provider[$p]:-}" ] || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] || die "packages not installed: ${missing[*]} (make servers, or apt-get install ${missing[*]})"
}

# --- staging -----------------------------------------------------------------

# On a merged-/usr host /bin, /lib, /lib64 and /sbin are symlinks into /usr;
# package file lists still name the old paths. Stage the real paths and
# recreate the symlinks, as a merged-/usr Debian root has them.
canonical_prefix_sed() {
	local d s=""
	for d in bin lib lib64 sbin; do
		if [ -L "/$d" ] && [ "$(readlink "/$d")" = "usr/$d" ]; then
			s+="s#^/$d/#/usr/$d/#;"
		fi
	done
	echo "$s"
}

# stage_packages root pkg...: copy every regular file and symlink the
# packages own into root.
stage_packages() {
	local root=$1; shift
	local list=$root.list
	dpkg-query -L "$@" 2>/dev/null | grep '^/' |
		grep -Ev '^/usr/share/(doc|man|info|locale|lintian|bug|bash-completion)/' |
		sed -e "$(canonical_prefix_sed)" | sort -u |
		while IFS= read -r f; do
			if [ -L "$f" ] || { [ -e "$f" ] && [ ! -d "$f" ]; }; then printf '%s\n' "${f#/}"; fi
		done >"$list"
	tar -C / --no-recursion -cf - -T "$list" | tar -C "$root" -xpf -
	rm -f "$list"
}

finish_root() {
	local root=$1 d
	for d in bin lib lib64 sbin; do
		mkdir -p "$root/usr/$d"
		[ -e "$root/$d" ] || ln -s "usr/$d" "$root/$d"
	done
	mkdir -p "$root/etc" "$root/data" "$root/dev" "$root/proc" "$root/sys" "$root/run" "$root/var/tmp"
	install -d -m 1777 "$root/tmp"
	[ -e "$root/bin/sh" ] || ln -s dash "$root/usr/bin/sh"
	cat >"$root/etc/passwd" <<-'EOF'
	root:x:0:0:root:/root:/bin/sh
	redis:x:999:999:redis:/data:/usr/sbin/nologin
	zookeeper:x:1000:1000:zookeeper:/data:/usr/sbin/nologin
	memcache:x:11211:11211:memcache:/home/memcache:/usr/sbin/nologin
	nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
	EOF
	cat >"$root/etc/group" <<-'EOF'
	root:x:0:
	redis:x:999:
	zookeeper:x:1000:
	memcache:x:11211:
	nogroup:x:65534:
	EOF
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
	mkdir -p "$root/root" "$root/home/memcache"
	chown 11211:11211 "$root/home/memcache" 2>/dev/null || true
	if [ "$(id -u)" -eq 0 ]; then
		ldconfig -r "$root" 2>/dev/null || log "ldconfig -r failed; the loader will search the standard directories"
	fi
}

# --- images ------------------------------------------------------------------

# ours tag: 0 if tag holds an image this script built, 1 if it holds another
# image, 2 if the tag is free.
ours() {
	local src
	src=$(docker image inspect -f "{{ index .Config.Labels \"$label_src\" }}" "$1" 2>/dev/null) || return 2
	[ "$src" = "debian-packages" ]
}

# build name tag "root packages" changes...
build() {
	local name=$1 tag=$2 pkgs=$3; shift 3
	local rc=0 closure_pkgs versions have t0
	t0=$(date +%s)
	ours "$tag" || rc=$?
	if [ $rc -eq 1 ] && [ "${FORCE:-}" != 1 ]; then
		log "$tag exists and was not built by this script (a pulled image?): keeping it; FORCE=1 replaces it"
		return 0
	fi
	# shellcheck disable=SC2086
	require_installed $pkgs
	# shellcheck disable=SC2086
	closure_pkgs=$(closure $(for p in $pkgs; do echo "${provider[$p]}"; done) | sort)
	# shellcheck disable=SC2086
	versions=$(dpkg-query -W -f='${Package}=${Version}\n' $closure_pkgs | sha256sum | cut -c1-16)
	if [ $rc -eq 0 ] && [ "${REBUILD:-}" != 1 ] &&
		[ "$(docker image inspect -f "{{ index .Config.Labels \"$label_pkgs\" }}" "$tag")" = "$versions" ]; then
		log "$tag is up to date (same package versions); REBUILD=1 rebuilds it"
		return 0
	fi
	local root
	root=$(mktemp -d "${TMPDIR:-/tmp}/dlock-image-$name.XXXXXX")
	staged+=("$root")
	# shellcheck disable=SC2086
	stage_packages "$root" $closure_pkgs
	finish_root "$root"
	"extra_$name" "$root"
	local args=() c
	for c in "$@"; do args+=(--change "$c"); done
	tar -C "$root" --numeric-owner -cf - . |
		docker import \
			--change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
			--change "LABEL $label_src=debian-packages $label_pkgs=$versions" \
			"${args[@]}" \
			--message "dlock: $name from Debian packages: $(echo $closure_pkgs | wc -w) packages" \
			- "$tag" >/dev/null
	local mb
	mb=$(du -sm "$root" | cut -f1)
	rm -rf "$root"
	"smoke_$name" "$tag"
	log "$tag: built from $(echo $closure_pkgs | wc -w) Debian packages ($mb MB) in $(($(date +%s) - t0))s"
}

extra_redis() { :; }
extra_etcd() { :; }
extra_memcached() { :; }
extra_zookeeper() {
	local root=$1
	ln -sf "$jvm/bin/java" "$root/usr/bin/java"
	# A standalone server on 2181 by default, like the official image; the
	# harness and docker-compose.yml start it with their own configuration.
	mkdir -p "$root/conf"
	cat >"$root/conf/zoo.cfg" <<-'EOF'
	tickTime=2000
	initLimit=10
	syncLimit=5
	dataDir=/data
	clientPort=2181
	admin.enableServer=false
	4lw.commands.whitelist=*
	EOF
}

# PostgreSQL's programs run from their directory (on PATH in the image, as
# in the official one); the harness starts them with its own script
# (internal/testsupport/testserver/pgstart.sh), so the image has no command of its own.
# The postgres user owns /var/lib/postgresql, where the data go.
extra_postgres() {
	local root=$1
	echo 'postgres:x:5432:5432:PostgreSQL administrator:/var/lib/postgresql:/bin/sh' >>"$root/etc/passwd"
	echo 'postgres:x:5432:' >>"$root/etc/group"
	mkdir -p "$root/var/lib/postgresql"
	chown 5432:5432 "$root/var/lib/postgresql" 2>/dev/null || true
}

smoke_redis() {
	docker run --rm --network none --entrypoint redis-server "$1" --version >/dev/null ||
		die "$1: redis-server does not run in the image"
	docker run --rm --network none --entrypoint redis-cli "$1" --version >/dev/null ||
		die "$1: redis-cli does not run in the image"
}
smoke_etcd() {
	docker run --rm --network none --entrypoint etcd "$1" --version >/dev/null ||
		die "$1: etcd does not run in the image"
}
smoke_memcached() {
	docker run --rm --network none --entrypoint memcached "$1" -V >/dev/null ||
		die "$1: memcached does not run in the image"
}
smoke_postgres() {
	local out
	out=$(docker run --rm --network none --entrypoint sh "$1" -c \
		'initdb -D /tmp/smoke -U postgres -A trust --locale=C -E UTF8 --no-sync && postgres --version && psql --version && pg_basebackup --version' 2>&1) ||
		die "$1: initdb, postgres, psql or pg_basebackup does not run in the image:
$out"
}
smoke_zookeeper() {
	docker run --rm --network none --entrypoint java "$1" -Xshare:auto -cp "$zk_classpath" \
		org.apache.zookeeper.version.VersionInfoMain >/dev/null ||
		die "$1: ZooKeeper's VersionInfoMain does not run in the image"
}

zk_classpath=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar

staged=()
trap 'rm -rf "${staged[@]}"' EXIT
load_providers
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(redis memcached zookeeper postgres etcd)
for t in "${targets[@]}"; do
	case $t in
	redis)
		build redis "$redis_tag" "redis-server redis-tools dash" \
			'WORKDIR /data' 'EXPOSE 6379' 'CMD ["redis-server", "--protected-mode", "no"]' ;;
	etcd)
		build etcd "$etcd_tag" "etcd-server dash" \
			'WORKDIR /data' 'EXPOSE 2379 2380' 'CMD ["etcd"]' ;;
	memcached)
		build memcached "$memcached_tag" "memcached dash" \
			'USER memcache' 'EXPOSE 11211' 'CMD ["memcached"]' ;;
	zookeeper)
		build zookeeper "$zookeeper_tag" "libzookeeper-java libslf4j-java openjdk-17-jre-headless dash" \
			"ENV JAVA_HOME=$jvm" 'WORKDIR /data' 'EXPOSE 2181 2888 3888' \
			"CMD [\"java\", \"-cp\", \"$zk_classpath\", \"org.apache.zookeeper.server.quorum.QuorumPeerMain\", \"/conf/zoo.cfg\"]" ;;
	postgres)
		# The server's binaries and libraries only: not Debian's cluster
		# tools (postgresql-common, with Perl), locales (the harness's
		# clusters use the C locale), nor LLVM (just-in-time compilation,
		# which the harness turns off).
		pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
		[ -n "$pgbin" ] || die "no /usr/lib/postgresql/*/bin: make servers, or apt-get install postgresql"
		pgver=$(basename "$(dirname "$pgbin")")
		skip=([postgresql-common]=1 [postgresql-client-common]=1 [locales]=1 [locales-all]=1
			[ssl-cert]=1 [debconf]=1 [sensible-utils]=1)
		llvm=$(dpkg-query -W -f='${Depends}' "postgresql-$pgver" | grep -o 'libllvm[0-9]*' | head -1)
		[ -z "$llvm" ] || skip[$llvm]=1
		build postgres "$postgres_tag" "postgresql-$pgver postgresql-client-$pgver dash" \
			"ENV PATH=$pgbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
			'USER postgres' 'WORKDIR /var/lib/postgresql' 'EXPOSE 5432'
		skip=() ;;
	*) die "unknown image $t (want redis, memcached, zookeeper or postgres)" ;;
	esac
done
