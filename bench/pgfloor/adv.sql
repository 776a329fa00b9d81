\set key :client_id + 1
SELECT pg_try_advisory_lock(:key);
SELECT pg_advisory_unlock(:key);
