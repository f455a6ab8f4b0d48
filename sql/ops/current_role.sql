-- The role reaper's statements run as, for a message that names it.
SELECT current_user::text
