-- Complete a detach that was interrupted (pg_inherits.inhdetachpending).
ALTER TABLE {parent} DETACH PARTITION {partition} FINALIZE
