-- The later of the request's resolution and creation. The predicate reaches its rows
-- through their tokens, not in this order: the oldest-row gauge is the oldest of the first
-- --backlog-limit eligible rows found, exact when fewer are eligible, a lower bound otherwise.
greatest(resolved_at, created_at)
