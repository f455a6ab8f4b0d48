-- Bootstrap members (no session), not ephemeral, silent for longer than the node retention.
-- Every refresh rewrites enrolled_at. Banned members stay.
-- Served by nodes_bootstrap_enrolled_at_idx.
expires_at IS NULL AND NOT banned AND NOT ephemeral AND enrolled_at < %(cutoff)s
