#!/usr/bin/env bash
# Waits until the servers of docker-compose.yml answer on their loopback
# ports: Redis PING, the cluster's CLUSTER INFO (cluster_state:ok), memcached
# version, ZooKeeper srvr. Needs only bash (/dev/tcp). Used by `make up`.
set -euo pipefail
timeout=${WAIT_TIMEOUT:-90}

# ask port request: send request, print the reply (up to 1 s of it).
ask() {
	local reply=""
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf '%b' "$2" >&3
	while IFS= read -r -t 1 line <&3; do reply+=$line$'\n'; [ "${#reply}" -gt 4096 ] && break; done
	exec 3<&- 3>&-
	printf '%s' "$reply"
}

check() { # name port request expected-substring
	local deadline=$((SECONDS + timeout))
	until ask "$2" "$3" 2>/dev/null | grep -q "$4"; do
		if [ $SECONDS -ge $deadline ]; then
			echo "wait-up: $1 on 127.0.0.1:$2 not ready after ${timeout}s (docker-compose logs shows why)" >&2
			return 1
		fi
		sleep 0.2
	done
	echo "wait-up: $1 on 127.0.0.1:$2 ready"
}

check redis 6379 'PING\r\nQUIT\r\n' PONG
for p in 7000 7001 7002; do check "redis cluster node" $p 'CLUSTER INFO\r\nQUIT\r\n' cluster_state:ok; done
check memcached 11211 'version\r\nquit\r\n' VERSION
check memcached 11212 'version\r\nquit\r\n' VERSION
check zookeeper 2181 'srvr' 'Mode: '
