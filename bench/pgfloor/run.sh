#!/bin/sh
# The PostgreSQL floors of docs/performance.md: pgbench -M prepared runs
# of an advisory pair, a minimal durable pair (two UPDATEs of a row),
# dlock's plain Lock and Unlock statements and their parts, and the
# durable pair without synchronous commit, interleaved, then pgfloor's
# LISTEN/NOTIFY chains; for each run the server's CPU (/proc: the
# postmaster, the children it reaped, its live children), pg_stat_wal
# and the commits. Usage: run.sh URL OUTDIR [SECONDS [ROUNDS]]; the
# server must run on this host (bin/serve -kinds postgres).
set -eu
U=$1 OUT=$2 T=${3:-20} ROUNDS=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
psql -qX "$U" -c "DROP TABLE IF EXISTS pgfloor_k; CREATE TABLE pgfloor_k (key text PRIMARY KEY, h text) WITH (fillfactor = 50);
  INSERT INTO pgfloor_k SELECT g::text FROM generate_series(0, 32) g; CREATE SEQUENCE IF NOT EXISTS pgfloor_grants"
"$here/plain.sh" >"$OUT/plain.sql"
(cd "$here/.." && go build -o "$OUT/pgfloor" ./pgfloor)
"$OUT/pgfloor" install "$U" "$OUT"
# dlock9.sql taken apart: without the settings filter (r keeps its FOR
# UPDATE), without the FOR UPDATE (r keeps the filter), without r at all.
q="'"
sed "s/ AND pg_catalog.current_setting([^)]*) OPERATOR(pg_catalog.[<>=]*) $q[^$q]*$q//g" "$OUT/dlock9.sql" >"$OUT/nofilter.sql"
sed "s/ FOR UPDATE) / ) /" "$OUT/dlock9.sql" >"$OUT/nolock.sql"
sed "s/^WITH r AS MATERIALIZED (.* FOR UPDATE) UPDATE /UPDATE /; s/ c, r WHERE / c WHERE /; s/ FROM r WHERE / WHERE /" "$OUT/dlock9.sql" >"$OUT/bare.sql"
grep -c 'current_setting' "$OUT/nofilter.sql" "$OUT/bare.sql" | grep -q ':[^0]' && { echo "run.sh: the settings filter is still in nofilter.sql or bare.sql" >&2; exit 1; }
grep -q 'WITH r\|FOR UPDATE' "$OUT/bare.sql" && { echo "run.sh: bare.sql still has r" >&2; exit 1; }
[ "$(grep -c 'FOR UPDATE' "$OUT/nolock.sql")" = 0 ] || { echo "run.sh: nolock.sql still locks" >&2; exit 1; }
cp "$here"/adv.sql "$here"/adv_hot.sql "$here"/row.sql "$here"/row_hot.sql "$OUT/"
port=$(psql -AtX "$U" -c 'SHOW port')
pm=$(ps -eo pid=,args= | awk -v p="port=$port" '$2 ~ /bin\/postgres$/ && index($0, p " ") {print $1}')
[ -n "$pm" ] || { echo "run.sh: no postmaster with $port on this host" >&2; exit 1; }
cpu() { # the server's CPU, clock ticks
	{ awk '{print $14+$15+$16+$17}' /proc/"$pm"/stat
	  for p in $(ps -o pid= --ppid "$pm"); do awk '{print $14+$15}' /proc/"$p"/stat 2>/dev/null || true; done
	} | awk '{s+=$1} END {print s}'
}
stats() {
	psql -AtX -F' ' "$U" -c "SELECT w.wal_records, w.wal_bytes, w.wal_write, w.wal_sync, d.xact_commit,
	  (SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname IN ('pgfloor_k', 'keys')),
	  (SELECT last_value FROM pgfloor_grants)
	  FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()"
}
# run NAME CLIENTS SCRIPT [PGOPTIONS]
run() {
	name=$1 c=$2 f=$3 opts=${4:-}
	j=1; [ "$c" -gt 1 ] && j=2
	sleep 1
	c0=$(cpu); s0=$(stats)
	case $f in
	chain:*) "$OUT/pgfloor" chain "$U" "${f#chain:}" "$c" "$T" >"$OUT/$name-c$c-$r.txt" 2>&1 ;;
	*) PGOPTIONS="$opts" pgbench -n -M prepared -T "$T" -c "$c" -j "$j" -f "$OUT/$f" "$U" >"$OUT/$name-c$c-$r.txt" 2>&1 ;;
	esac
	sleep 1.5 # backends exit and flush their statistics
	c1=$(cpu); s1=$(stats)
	case $f in
	chain:*) res=$(awk '/^chain/ {print $4, $4/$7, 0}' "$OUT/$name-c$c-$r.txt") ;;
	*) res="$(grep -E '^number of transactions actually processed' "$OUT/$name-c$c-$r.txt" | awk '{print $NF}') $(grep -E '^tps' "$OUT/$name-c$c-$r.txt" | awk '{print $3}') $(grep -E '^latency average' "$OUT/$name-c$c-$r.txt" | awk '{print $4}')" ;;
	esac
	echo "$name c$c r$r $res $((c1 - c0)) $s0 $s1" |
		awk -v hz="$(getconf CLK_TCK)" '{
		  n=$4; tps=$5; lat=$6; cpu=$7*1e6/hz;   # µs
		  rec=$15-$8; by=$16-$9; wr=$17-$10; sy=$18-$11; com=$19-$12; upd=$20-$13; seq=$21-$14;
		  g=n; if ($1 ~ /hot/) { g = ($1 ~ /adv/) ? seq : upd/2 }
		  if ($1 ~ /chain/) { tps = n/'"$T"' }
		  printf "%-12s %-4s %-3s tx %7d tx/s %8.1f lat %7.3f ms | grants %7d %8.1f/s | server CPU %6.1f us/grant | WAL rec %5.2f bytes %6.0f writes %5.2f syncs %4.2f commits %5.2f per grant\n",
		    $1, $2, $3, n, tps, lat, g, g/'"$T"', cpu/g, rec/g, by/g, wr/g, sy/g, com/g }' | tee -a "$OUT/summary.txt"
}
for r in $(seq "$ROUNDS"); do
	for c in 1 32; do
		run adv "$c" adv.sql
		run row "$c" row.sql
		run dlock9 "$c" dlock9.sql
		run nofilter "$c" nofilter.sql
		run nolock "$c" nolock.sql
		run bare "$c" bare.sql
		run rowasync "$c" row.sql "-c synchronous_commit=off"
	done
	run adv_hot 32 adv_hot.sql
	run row_hot 32 row_hot.sql
	run dlock9_hot 32 dlock9_hot.sql
	run rowasync_hot 32 row_hot.sql "-c synchronous_commit=off"
	for c in 2 32; do
		run chain_claim "$c" chain:claim
		run chain_hand "$c" chain:handover
	done
done
