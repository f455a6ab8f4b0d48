-- %(rows)s enrollment requests; request i is garbage when i mod %(den)s < %(num)s (B1: 2 of
-- 3), else live. Garbage and live rows are interleaved in the heap (insertion order is i, not
-- age). Garbage comes in three kinds: resolved 60 days ago, pending since 61 days ago (the two
-- arms of the enrollment_requests predicate), and (one in ten) pending since 61 days ago on an
-- ephemeral token (enrollment_requests_ephemeral's too). Live requests were created a day ago.
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT CASE WHEN g AND k = 5 THEN (SELECT min(id) FROM bootstrap_tokens WHERE ephemeral)
            ELSE (SELECT min(id) FROM bootstrap_tokens WHERE NOT ephemeral) + i %% 50 END,
       'peer-' || i,
       CASE WHEN i %% 2 = 0 AND NOT (g AND k = 5) THEN 'approved' ELSE 'pending' END,
       CASE WHEN g THEN now() - interval '61 days' - (i %% 1000) * interval '1 minute'
            ELSE now() - interval '1 day' - (i %% 1000) * interval '1 minute' END,
       CASE WHEN g AND k = 5 THEN NULL
            WHEN i %% 2 = 0 AND g THEN now() - interval '60 days'
            WHEN i %% 2 = 0 THEN now() - interval '20 hours' END
FROM generate_series(1, %(rows)s) AS s (i),
     LATERAL (SELECT i %% %(den)s < %(num)s AS g, (i / %(den)s) %% 10 AS k) AS x
