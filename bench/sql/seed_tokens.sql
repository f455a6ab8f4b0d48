-- The tokens the seeded requests reference: 50 live ones and one ephemeral one.
INSERT INTO bootstrap_tokens (token_hash, expires_at, ephemeral)
SELECT 'bench-' || i, now() + interval '30 days', i = 0
FROM generate_series(0, 50) AS s (i)
