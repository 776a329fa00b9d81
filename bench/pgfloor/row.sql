\set key :client_id + 1
\set owner :client_id + 1000
UPDATE pgfloor_k SET h = :owner WHERE key = :key AND h IS NULL;
UPDATE pgfloor_k SET h = NULL WHERE key = :key AND h = :owner;
