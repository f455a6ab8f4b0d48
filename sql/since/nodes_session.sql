-- The moment a member's session lapsed: its age past the cutoff is cutoff - expires_at.
-- ORDER BY it is served by nodes_session_expires_at_idx.
expires_at
