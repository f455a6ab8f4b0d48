-- One arm of first_eligible_arms.sql: the arm's first {limit} rows, oldest first, which is
-- the order of the index on its age: an ordered index range that stops after {limit}
-- entries, never a bitmap of all of them.
(SELECT {columns} FROM {relation} WHERE ({arm}){also} ORDER BY {age} LIMIT {limit})
