-- The last time the member was heard from. ORDER BY it is served by
-- nodes_bootstrap_enrolled_at_idx (ephemeral = false, enrolled_at).
enrolled_at
