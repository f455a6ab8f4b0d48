-- Tokens expired more than the node retention ago that no enrollment request references.
-- A request inserted after this check still blocks the delete (its foreign key): that batch
-- rolls back, the request survives, and the token is retried next time.
-- Served by bootstrap_tokens_expires_at_idx and, for the anti-join, enrollment_requests_token_id_age_idx.
expires_at < %(cutoff)s
AND NOT EXISTS (SELECT 1 FROM {schema}.enrollment_requests r WHERE r.token_id = bootstrap_tokens.id)
