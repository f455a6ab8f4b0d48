-- B4: %(rows)s bootstrap members (no session), interleaved in the heap. Member i is:
-- at the cutoff when i mod 100 = 0 (silent 30 days and 10 minutes: garbage when the sweep
-- starts, and refreshed by the edge clients while it runs); silent for 60 days when i is
-- otherwise even (garbage); live (heard from within the last day) when i is odd.
INSERT INTO nodes (peer_id, enrolled_at, expires_at, banned, ephemeral)
SELECT 'node-' || i,
       CASE WHEN i %% 100 = 0 THEN now() - interval '30 days 10 minutes'
            WHEN i %% 2 = 0 THEN now() - interval '60 days' - (i %% 1000) * interval '1 minute'
            ELSE now() - (i %% 1000) * interval '1 minute' END,
       NULL, false, false
FROM generate_series(1, %(rows)s) AS s (i)
