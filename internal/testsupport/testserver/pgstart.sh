#!/bin/sh
# pgstart.sh PWFILE PRIMARY KEY [postgres option...]
#
# Starts PostgreSQL inside a container for internal/testsupport/testserver's docker
# provider (embedded), whichever of two images it runs in: the official
# postgres image (which starts as root, with gosu) or the one `make images`
# builds from Debian packages (which starts as postgres). Both have
# initdb, postgres and pg_basebackup on PATH.
#
# On the container's first start it makes the data directory: with initdb
# (superuser postgres, the password in PWFILE, SCRAM over TCP, the C
# locale) when PRIMARY is "-", else as a hot standby of PRIMARY
# (host:port) with pg_basebackup -R. Later starts (docker start after a
# kill) keep it, hence the data. postgres runs with the options given.
#
# KEY, unless "-", is the server's TLS key (PostgresOptions.TLS), put in
# the container readable by all: it is copied to
# /var/lib/postgresql/dlock-server-key.pem, the postgres user's with mode
# 0600, as PostgreSQL requires (the options name the copy).
#
# docker stop sends SIGTERM, which PostgreSQL takes as a smart shutdown
# (waiting for every client to leave); this script turns it into a fast
# one (SIGINT), as the local provider's Stop does.
#
# The image built from Debian packages has no coreutils: dash's builtins
# only.
set -eu
uid=
while read -r key value _; do
	if [ "$key" = Uid: ]; then uid=$value; fi
done </proc/self/status
if [ "$uid" = 0 ]; then
	for su in gosu su-exec; do
		if command -v "$su" >/dev/null; then exec "$su" postgres "$0" "$@"; fi
	done
	echo "pgstart.sh: running as root, and neither gosu nor su-exec to become postgres" >&2
	exit 1
fi
pwfile=$1
primary=$2
key=$3
shift 3
if [ "$key" != - ]; then
	(
		umask 077
		while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done <"$key" >/var/lib/postgresql/dlock-server-key.pem
	)
fi
data=/var/lib/postgresql/dlock
if [ ! -s "$data/PG_VERSION" ]; then
	if [ "$primary" = - ]; then
		initdb -D "$data" -U postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
			-E UTF8 --locale=C --no-sync --no-instructions
	else
		read -r password <"$pwfile"
		PGPASSWORD=$password PGCONNECT_TIMEOUT=5 pg_basebackup -h "${primary%:*}" -p "${primary##*:}" \
			-U postgres -D "$data" -R -X stream -c fast --no-sync
	fi
fi
postgres -D "$data" "$@" &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true' TERM INT
status=0
while kill -0 "$pid" 2>/dev/null; do
	wait "$pid" || status=$?
done
exit "$status"
