-- A client refreshing a member, as the gateway does on every heartbeat.
UPDATE nodes SET enrolled_at = now() WHERE peer_id = %(peer_id)s
