-- When the request was resolved, or created if still pending: the expression that
-- enrollment_requests_resolved_or_created_idx holds, so the oldest row is read first.
coalesce(resolved_at, created_at)
