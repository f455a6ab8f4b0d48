-- Members whose session lapsed more than the session retention ago. Banned members stay.
-- Served by nodes_session_expires_at_idx.
expires_at < %(cutoff)s AND NOT banned
