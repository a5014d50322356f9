-- Limits that hold across the cluster (issue 44, cluster/store/postgres/limits.py,
-- docs/design/limits.md). A key's limit is split evenly between the shards; each
-- shard admits its share of its own jobs of the key. The concurrency in
-- use is the shard's RUNNING rows of the key whose lease runs: a permit is
-- the row itself, so it comes back when the job ends, or when its lease
-- does if its holder died. The rate is a GCRA state per key (limit_buckets).
--
-- claim_jobs_except (the regular claim, leaving out the limited keys) is
-- derived from claim_jobs in cluster/store/sql/__init__.py.

-- name: limit_lock
-- First statement of a limited claim's transaction: the key's bucket row,
-- locked until the claim commits (limited claims of one key on one shard
-- take turns, so each counts what the one before it claimed). The time is
-- the transaction's: every statement of the claim reads the same now.
INSERT INTO limit_buckets AS b (key) VALUES (%(key)s)
ON CONFLICT (key) DO UPDATE SET key = b.key
RETURNING b.tat, coalesce(%(now)s, now()) AS now;

-- name: claim_limited
-- Second statement: with the bucket locked (a new snapshot, which sees
-- the claims committed before the lock was ours), the due jobs of the key
-- up to the room its share has: at most %(most)s (the rate's admission,
-- worked out from the bucket by the caller), at most the concurrency share
-- less the running ones. The bucket's state advances by the jobs taken.
-- Only jobs due now: a job held back stays SCHEDULED, free to be cancelled.
WITH running AS (
    SELECT count(*)::int AS n FROM jobs
     WHERE status = 'RUNNING' AND lease_until > %(now)s
       AND vakit_limit_key(target_kind, target) = %(key)s
),
due AS (
    SELECT id, run_at FROM jobs
     WHERE status = 'SCHEDULED' AND run_at <= %(now)s
       AND vakit_limit_key(target_kind, target) = %(key)s
       AND {fence:jobs.id}
     ORDER BY run_at
     LIMIT greatest(0, least(%(most)s, %(concurrency)s::int - (SELECT n FROM running)))
       FOR UPDATE OF jobs SKIP LOCKED
),
claimed AS (
    UPDATE jobs j
       SET status = 'RUNNING',
           attempt = j.attempt + 1,
           locked_by = %(worker)s,
           claimed_at = %(now)s,
           -- Admitted jobs start within the horizon: the lease covers it.
           lease_until = %(now)s + make_interval(secs => %(horizon)s
                         + least(j.timeout_seconds, %(lease)s) + %(grace)s)
      FROM due
     WHERE j.id = due.id
    RETURNING j.id, j.attempt, j.max_attempts, j.type, j.scheduled_for, j.run_at,
              j.timeout_seconds, j.target::text, j.payload::text AS payload_json,
              j.lease_until, j.cron_id, j.concurrency, j.deadline_at, j.owner_service
),
advanced AS (
    UPDATE limit_buckets
       SET tat = %(base)s::timestamptz
                 + make_interval(secs => (SELECT count(*) FROM claimed) * %(interval)s::float8)
     WHERE key = %(key)s AND %(interval)s::float8 IS NOT NULL
)
SELECT * FROM claimed ORDER BY run_at, id;

-- name: limit_slow
-- Back-pressure: a target answered 429/503 with Retry-After; the key's
-- next firing on this shard waits until then.
INSERT INTO limit_buckets AS b (key, tat) VALUES (%(key)s, %(until)s)
ON CONFLICT (key) DO UPDATE SET tat = greatest(b.tat, excluded.tat);

-- name: limits_read
SELECT key, concurrency, rate, burst, updated_at FROM target_limits ORDER BY key;

-- name: limit_set
INSERT INTO target_limits (key, concurrency, rate, burst, updated_at)
VALUES (%(key)s, %(concurrency)s, %(rate)s, %(burst)s, now())
ON CONFLICT (key) DO UPDATE
   SET concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst,
       updated_at = excluded.updated_at;

-- name: limit_drop
DELETE FROM target_limits WHERE key = %(key)s;

-- name: limits_waiting
-- The jobs each limited key holds back on this shard: due, not claimed.
-- Read every few seconds by each worker polling the shard, only while
-- some key is limited; it reads the due rows (the backlog), no more.
SELECT vakit_limit_key(target_kind, target) AS key, count(*)::int AS jobs
  FROM jobs
 WHERE status = 'SCHEDULED' AND run_at <= now()
   AND vakit_limit_key(target_kind, target) = ANY(%(keys)s)
 GROUP BY 1;
