#!/usr/bin/env bash
# Installs the backend servers the tests run against (Debian packages):
# redis-server and redis-cli, memcached, ZooKeeper with a Java runtime,
# PostgreSQL 15 (postgresql: initdb, postgres, psql, pg_basebackup under
# /usr/lib/postgresql/15/bin), PgBouncer and etcd (etcd-server 3.4).
# Does nothing for what is already installed; needs root or sudo otherwise.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v memcached >/dev/null || missing+=(memcached)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null || missing+=(default-jre-headless)
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql)
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v etcd >/dev/null || missing+=(etcd-server)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing missing servers: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "cannot install ${missing[*]}: not root and no sudo; install them or set DLOCK_*_ADDR" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null; then
  echo "no apt-get: install ${missing[*]} with your package manager, or set DLOCK_*_ADDR" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages start their services; the tests start their own servers on
# free ports, so stop the system ones just installed where a service manager
# runs them (a PostgreSQL cluster that was there before is left alone).
for svc in "${missing[@]}"; do
  case $svc in
  redis-server | memcached | zookeeper | postgresql | pgbouncer)
    $sudo service "$svc" stop >/dev/null 2>&1 || true ;;
  etcd-server)
    $sudo service etcd stop >/dev/null 2>&1 || true ;;
  esac
done
