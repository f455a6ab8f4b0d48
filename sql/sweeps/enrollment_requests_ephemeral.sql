-- Requests of an ephemeral token resolved, or still pending and created, before the
-- ephemeral cutoff: the later of resolved_at and created_at (greatest() skips a NULL), never
-- earlier than the age enrollment_requests compares (resolved_at, else created_at).
-- Found as a join: the ephemeral tokens (bootstrap_tokens_ephemeral_idx) and, for each, an
-- index range of enrollment_requests_token_id_age_idx on (token_id, this very age), which
-- holds only the rows to delete; tested on a row (a heap walk, a re-check), one probe of the
-- token's primary key. The token is a conjunct of its own (an EXISTS, never inside an OR):
-- written as an array of the ephemeral tokens (token_id = ANY (ARRAY(...))), it is searched
-- linearly for every row tested, and 120,000 eligible requests of 100,000 ephemeral tokens
-- took 31 s to count, against 0.15 s so.
-- greatest(), one expression: no plan can read the requests through
-- enrollment_requests_resolved_at_idx or enrollment_requests_pending_created_at_idx, which
-- list every request older than the ephemeral retention (an hour), nearly all of them
-- another token's.
greatest(resolved_at, created_at) < %(cutoff)s
AND EXISTS (SELECT 1 FROM {schema}.bootstrap_tokens t WHERE t.id = token_id AND t.ephemeral)
