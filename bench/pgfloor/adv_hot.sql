SELECT pg_try_advisory_lock(0)::int AS got \gset
\if :got
SELECT pg_advisory_unlock(0), nextval('pgfloor_grants');
\else
\sleep 1 ms
\endif
