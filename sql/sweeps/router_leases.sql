-- Router leases that expired more than the node retention ago.
-- Served by routers_lease_expires_at_idx.
lease_expires_at < %(cutoff)s
