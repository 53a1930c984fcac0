-- The rollup of settlements (workqueue/stats.py) and its reads: the dashboard's last hour and
-- the charts. Same conventions as queries.sql. A row of work_queue_stats is one queue's
-- settlements in one minute (span 60) or one hour (span 3600), with histograms of the wait
-- (run_after to start) and the run (start to settle), bucket b holding [2^(b/2), 2^((b+1)/2)) ms.


-- fragment: hist_bucket(seconds)
-- The histogram bucket of a duration in seconds (NULL stays NULL: work_hist skips it).
least(47, greatest(0, floor(2 * log(2, greatest(($seconds) * 1000, 1)::numeric))::int))


-- fragment: minute_stats(since, until)
-- Per queue and minute, the stopped items with SINCE <= stopped_at < UNTIL, in the shape of a
-- work_queue_stats row. The range on stopped_at under state = 'stopped' is the partial index
-- work_items_stopped_idx: the cost is the range's settlements, not the table.
SELECT w.queue, date_trunc('minute', w.stopped_at) AS period,
       count(*) FILTER (WHERE w.outcome = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE w.outcome = 'failed') AS failed,
       work_hist({hist_bucket:extract(epoch FROM w.started_at - w.run_after)}) AS wait_hist,
       work_hist({hist_bucket:extract(epoch FROM w.stopped_at - w.started_at)}) AS run_hist
FROM work_items w
WHERE w.state = 'stopped' AND w.stopped_at >= $since AND w.stopped_at < $until
GROUP BY 1, 2


-- name: stats_window
-- The minutes the next rollup writes: from the minute after the newest rolled-up one (at most
-- %(backfill)s seconds back: a first run, or one after a long pause, does not read the whole
-- history) to the last minute that ended %(lag)s seconds ago (a settle's transaction commits
-- within that; a later commit of an earlier minute is not counted).
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT greatest(
           (SELECT max(s.period) + interval '1 minute' FROM work_queue_stats s WHERE s.span = 60),
           date_trunc('minute', t.now - make_interval(secs => %(backfill)s))
       ) AS since,
       date_trunc('minute', t.now - make_interval(secs => %(lag)s)) AS until
FROM t;


-- name: stats_rollup_minutes
-- Write the minutes of [%(since)s, %(until)s) (each queue's, where it settled anything); a
-- minute written again is replaced, so a retried or overlapping rollup counts nothing twice.
INSERT INTO work_queue_stats (queue, span, period, succeeded, failed, wait_hist, run_hist)
SELECT m.queue, 60, m.period, m.succeeded, m.failed, m.wait_hist, m.run_hist
FROM ({minute_stats:%(since)s::timestamptz, %(until)s::timestamptz}) AS m
ORDER BY m.period, m.queue
ON CONFLICT (span, period, queue) DO UPDATE
SET succeeded = excluded.succeeded, failed = excluded.failed,
    wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;


-- name: stats_rollup_hours
-- Rewrite the hours from the one holding %(since)s on, each the sum of its minutes.
INSERT INTO work_queue_stats (queue, span, period, succeeded, failed, wait_hist, run_hist)
SELECT s.queue, 3600, date_trunc('hour', s.period), sum(s.succeeded), sum(s.failed),
       work_hist_sum(s.wait_hist), work_hist_sum(s.run_hist)
FROM work_queue_stats s
WHERE s.span = 60 AND s.period >= date_trunc('hour', %(since)s::timestamptz)
GROUP BY s.queue, date_trunc('hour', s.period)
ORDER BY 3, 1
ON CONFLICT (span, period, queue) DO UPDATE
SET succeeded = excluded.succeeded, failed = excluded.failed,
    wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;


-- name: stats_prune
-- Forget minutes older than %(minutes_kept)s seconds and hours older than %(hours_kept)s.
DELETE FROM work_queue_stats s
WHERE (s.span = 60 AND s.period < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(minutes_kept)s))
   OR (s.span = 3600 AND s.period < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(hours_kept)s));


-- name: stats_minutes
-- Per queue and minute over the %(window)s seconds up to %(now)s: the rolled-up minutes, then
-- the items' own rows for the minutes the rollup has not reached (all of them when it never
-- ran). The seam is the minute after the newest rolled-up one, so no minute is read twice.
WITH t AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
seam AS (
    SELECT t.now,
           t.now - make_interval(secs => %(window)s) AS start,
           least(t.now, greatest(
               t.now - make_interval(secs => %(window)s),
               (SELECT max(s.period) + interval '1 minute' FROM work_queue_stats s
                WHERE s.span = 60 AND s.period < t.now)
           )) AS upto
    FROM t
)
SELECT s.queue, s.period, s.succeeded, s.failed, s.wait_hist, s.run_hist
FROM work_queue_stats s, seam
WHERE s.span = 60 AND s.period > seam.start - interval '1 minute' AND s.period < seam.upto
UNION ALL
SELECT m.queue, m.period, m.succeeded, m.failed, m.wait_hist, m.run_hist
FROM ({minute_stats:(SELECT greatest(seam.upto, seam.start) FROM seam),
                    (SELECT seam.now + interval '1 microsecond' FROM seam)}) AS m;


-- name: stats_hours
-- Per queue and hour over the %(window)s seconds up to %(now)s, as rolled up (the current hour
-- as of the last rollup).
SELECT s.queue, s.period, s.succeeded, s.failed, s.wait_hist, s.run_hist
FROM work_queue_stats s
WHERE s.span = 3600
  AND s.period > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s) - interval '1 hour'
  AND s.period <= coalesce(%(now)s::timestamptz, now())
ORDER BY s.period;
