\set owner :client_id + 1000
WITH u AS (UPDATE pgfloor_k SET h = :owner WHERE key = '0' AND h IS NULL RETURNING 1) SELECT count(*) AS got FROM u \gset
\if :got
UPDATE pgfloor_k SET h = NULL WHERE key = '0' AND h = :owner;
\else
\sleep 1 ms
\endif
