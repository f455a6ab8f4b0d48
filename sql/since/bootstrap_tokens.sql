-- When the token expired. ORDER BY it is served by bootstrap_tokens_expires_at_idx.
expires_at
