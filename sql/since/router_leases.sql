-- When the lease expired. ORDER BY it is served by routers_lease_expires_at_idx.
lease_expires_at
