-- Ephemeral bootstrap members silent for longer than the ephemeral retention.
-- Served by nodes_bootstrap_enrolled_at_idx.
expires_at IS NULL AND NOT banned AND ephemeral AND enrolled_at < %(cutoff)s
