#!/bin/sh
# The same statements as run.sh, run N times each (statement, COMMIT,
# statement, COMMIT) in one DO block inside the server: no client, no
# protocol. Prints the backend's own CPU (/proc, read with pg_read_file:
# a superuser's URL), wall time and WAL per cycle, ROUNDS times, in
# alternating order. Usage: loop.sh URL OUTDIR [N [ROUNDS]], after run.sh
# (OUTDIR/plain.sql, the table pgfloor_k, key "1" of dlock.keys).
set -eu
U=$1 OUT=$2 N=${3:-10000} ROUNDS=${4:-6}
sub() { sed 's/\$1/k/g; s/\$2/o/g; s/\$3/ttl/g'; }
L=$(sed -n 1p "$OUT/plain.sql" | sub) UL=$(sed -n 2p "$OUT/plain.sql" | sub)
q="'"
filt() { sed "s/ AND pg_catalog.current_setting([^)]*) OPERATOR(pg_catalog.[<>=]*) $q[^$q]*$q//g"; }
nolock() { sed "s/ FOR UPDATE) / ) /"; }
bare() { sed "s/^WITH r AS MATERIALIZED (.* FOR UPDATE) UPDATE /UPDATE /; s/ c, r WHERE / c WHERE /; s/ FROM r WHERE / WHERE /"; }
into() { sed 's/\(RETURNING .*\)$/\1 INTO res/'; }
mk() { # NAME LOCK UNLOCK
	cat >"$OUT/loop_$1.sql" <<EOF
DO \$do\$
DECLARE k text := '1'; o text := 'floor'; ttl int8 := 30000000; res record; t0 timestamptz; c0 bigint; c1 bigint; w0 pg_lsn; st text;
BEGIN
  st := split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2);
  c0 := split_part(st, ' ', 12)::bigint + split_part(st, ' ', 13)::bigint;
  t0 := clock_timestamp(); w0 := pg_current_wal_insert_lsn();
  FOR i IN 1..$N LOOP
    $2;
    COMMIT;
    $3;
    COMMIT;
  END LOOP;
  st := split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2);
  c1 := split_part(st, ' ', 12)::bigint + split_part(st, ' ', 13)::bigint;
  RAISE NOTICE '% cpu % us/cycle wall % us/cycle wal % B/cycle', '$1', round((c1 - c0) * 1e6 / $(getconf CLK_TCK) / $N, 1),
    round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / $N, 1), round((pg_current_wal_insert_lsn() - w0) / $N, 0);
END
\$do\$;
EOF
}
mk dlock9 "$(echo "$L" | into)" "$(echo "$UL" | into)"
mk nofilter "$(echo "$L" | filt | into)" "$(echo "$UL" | filt | into)"
mk nolock "$(echo "$L" | nolock | into)" "$(echo "$UL" | nolock | into)"
mk bare "$(echo "$L" | bare | into)" "$(echo "$UL" | bare | into)"
mk row "UPDATE pgfloor_k SET h = o WHERE key = k AND h IS NULL" "UPDATE pgfloor_k SET h = NULL WHERE key = k AND h = o"
mk adv "PERFORM pg_try_advisory_lock(1)" "PERFORM pg_advisory_unlock(1)"
for r in $(seq "$ROUNDS"); do
	set -- adv row dlock9 nofilter nolock bare
	[ $((r % 2)) = 0 ] && set -- bare nolock nofilter dlock9 row adv
	for f; do psql -qX "$U" -f "$OUT/loop_$f.sql" 2>&1 | sed 's/.*NOTICE:  //'; done
done | tee -a "$OUT/loop.txt"
