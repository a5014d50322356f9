-- The console benchmark's statements (benchmarks/console.py): the tenant's
-- crons, history and attempt log, generated inside the shard with
-- generate_series (no row crosses the network), one shard at a time.
--
-- Ids are UUIDv7 as shardmap.new_uuid makes them: 48 bits of milliseconds,
-- version 7 with the 12-bit slot, then the variant and random bits (those
-- of a v4 uuid, whose byte 9 carries the same variant). Every row of shard
-- s gets slot s, which routes to s for any shard count above s.

-- name: make_partitions
SELECT vakit_ensure_day_partitions('job_history', current_date - %(days)s::int - 1, current_date + 3)
     + vakit_ensure_day_partitions('job_attempts', current_date - %(days)s::int - 1, current_date + 3);

-- name: insert_crons
-- Crons i = shard, shard + shards, …: every five minutes in Istanbul,
-- created `days` ago, named so that the list's order is the number's.
INSERT INTO cron_jobs (id, owner_service, name, schedule, schedule_kind, time_zone, type,
                       target_kind, target, payload, misfire_policy, concurrency, max_attempts,
                       timeout_seconds, enabled, anchor, next_fire_at, last_fire_at, fingerprint,
                       created_at, updated_at)
SELECT encode(substring(int8send((extract(epoch FROM t.created) * 1000)::bigint + i) FROM 3 FOR 6)
              || int2send((28672 + %(shard)s)::int2)
              || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid,
       %(owner)s, 'report-' || lpad(i::text, 6, '0'), '*/5 * * * *', 'CRON', 'Europe/Istanbul',
       'REPORT', 'HTTP', '{"kind": "HTTP", "url": "https://hooks.example.com/report"}',
       jsonb_build_object('report', i), 'RUN_ONCE', 'ALLOW', 3, 30, true, t.created,
       date_trunc('hour', now()) + interval '1 hour', date_trunc('hour', now()), 'bench-' || i,
       t.created, t.created
  FROM generate_series(%(shard)s, %(crons)s - 1, %(shards)s) i,
       (SELECT now() - make_interval(days => %(days)s) AS created) t;

-- name: insert_history
-- Rows i = shard, shard + shards, … < rows, finished evenly over the last
-- `days` days (the newest a minute ago). Three in five are occurrences of
-- this shard's crons, in turn; the rest one-shot jobs of two types. Of
-- each hundred: 95 SUCCEEDED, 3 FAILED, 1 CANCELLED, 1 SKIPPED.
WITH c AS (
    SELECT id, row_number() OVER (ORDER BY name) - 1 AS k
      FROM cron_jobs WHERE owner_service = %(owner)s
),
n AS (
    SELECT greatest(count(*), 1) AS n FROM c
),
g AS (
    SELECT i, (i / 5) %% n.n AS k,
           now() - interval '1 minute'
           - make_interval(days => %(days)s) * (1 - i::float8 / %(rows)s) AS fin
      FROM generate_series(%(shard)s, %(rows)s - 1, %(shards)s) i, n
),
r AS (
    SELECT g.i, g.fin, g.fin - interval '2 seconds' AS due,
           CASE WHEN g.i %% 5 < 3 THEN c.id END AS cron_id,
           CASE WHEN g.i %% 100 < 95 THEN 'SUCCEEDED' WHEN g.i %% 100 < 98 THEN 'FAILED'
                WHEN g.i %% 100 < 99 THEN 'CANCELLED' ELSE 'SKIPPED' END AS status
      FROM g LEFT JOIN c ON c.k = g.k
)
INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                         status, attempt, max_attempts, timeout_seconds, target_kind, target,
                         payload, last_error, created_at, finished_at)
SELECT encode(substring(int8send((extract(epoch FROM r.due) * 1000)::bigint) FROM 3 FOR 6)
              || int2send((28672 + %(shard)s)::int2)
              || substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')::uuid,
       %(owner)s, NULL,
       CASE WHEN r.cron_id IS NOT NULL THEN 'REPORT' WHEN r.i %% 2 = 0 THEN 'SETTLE' ELSE 'REMIND' END,
       r.cron_id, r.due, r.due, r.status,
       CASE r.status WHEN 'FAILED' THEN 3 WHEN 'SUCCEEDED' THEN 1 ELSE 0 END, 3, 30, 'HTTP',
       '{"kind": "HTTP", "url": "https://hooks.example.com/settle"}', jsonb_build_object('orderId', r.i),
       CASE r.status WHEN 'FAILED' THEN 'HTTP 503 from target' WHEN 'SKIPPED' THEN 'starting deadline passed' END,
       r.due, r.fin
  FROM r;

-- name: insert_attempts
-- One attempt a finished job that ran (the failed ones' last), as the
-- worker logs it: started 5 to 300 ms after its runAt (its lateness).
INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error,
                          lateness_seconds)
SELECT h.id, h.attempt, 'bench-worker-' || (h.attempt %% 2),
       h.run_at + make_interval(secs => l.late), h.finished_at,
       CASE h.status WHEN 'FAILED' THEN 'ERROR' ELSE h.status END, h.last_error, l.late
  FROM job_history h, LATERAL (SELECT 0.005 + random() * 0.295 AS late) l
 WHERE h.owner_service = %(owner)s AND h.status IN ('SUCCEEDED', 'FAILED');

-- name: analyze
VACUUM ANALYZE;

-- name: beat
-- The benchmark runs no worker: a beat an hour ahead keeps /readyz (which
-- wants a polling worker on every shard) green while the API serves.
INSERT INTO worker_beats (worker_id, last_seen) VALUES ('bench-console', now() + interval '1 hour')
ON CONFLICT (worker_id) DO UPDATE SET last_seen = excluded.last_seen;

-- name: sample_ids
-- A cron and a finished job to open, and the window of a filtered search.
SELECT (SELECT id FROM cron_jobs WHERE owner_service = %(owner)s ORDER BY name OFFSET %(offset)s LIMIT 1)
           AS cron_id,
       (SELECT id FROM job_history WHERE owner_service = %(owner)s AND status = 'FAILED'
         ORDER BY id DESC OFFSET 10 LIMIT 1) AS job_id;

-- name: counts
SELECT (SELECT count(*) FROM cron_jobs WHERE owner_service = %(owner)s) AS crons,
       (SELECT count(*) FROM job_history WHERE owner_service = %(owner)s) AS history,
       (SELECT count(*) FROM job_attempts) AS attempts,
       (SELECT count(*) FROM pg_inherits WHERE inhparent = 'job_history'::regclass) AS partitions;
