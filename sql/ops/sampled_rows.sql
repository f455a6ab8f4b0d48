-- The rows of a %(percent)s-% block sample of one heap ({heap}, composed by reaper.db) that the
-- connected role can read: under row-level security, only those its policies show.
SELECT count(*) FROM ONLY {heap} TABLESAMPLE SYSTEM (%(percent)s)
