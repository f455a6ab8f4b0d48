-- Every row of one heap, counted: a dry run's judgement of the full-table interlock for a
-- sweep whose table the sweeps before it would already have thinned (the rows that would be
-- left are this count minus theirs, exactly; a sample's projection errs by more than the
-- interlock's margin there).
SELECT count(*) FROM ONLY {heap} AS {alias}
