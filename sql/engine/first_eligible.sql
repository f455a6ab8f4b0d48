-- The first {limit} rows the predicate matches (no order), for a statement that wants only
-- that many: the victims of an index batch, the gauges' capped reads. {columns} of
-- {relation}; {also} is more of the WHERE clause (AND ...), or nothing. A predicate that is an
-- OR of disjoint arms is read arm by arm instead (first_eligible_arms.sql).
SELECT {columns} FROM {relation} WHERE ({predicate}){also} LIMIT {limit}
