-- A dedicated session's own statement_timeout (a value such as 600000ms), for the session's
-- life: a statement that needs longer than a batch (CREATE INDEX CONCURRENTLY).
SELECT set_config('statement_timeout', %(timeout)s, false)
