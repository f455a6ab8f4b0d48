-- Whether a table exists (to_regclass follows search_path, as the sweep's statements do).
SELECT to_regclass(%(table)s) IS NOT NULL AS present
