-- What a batch returns of the rows it deleted, after deleted, selected and last_tid: keys,
-- one JSON array of each row's key values (the table's primary key, or the sweep's declared
-- key), and lines, each row as a JSON object's text (every column of the swept table), for a
-- sweep that writes its deleted rows as JSON lines. {keys} and {lines} are NULL when not
-- wanted.
{keys} AS keys,
{lines} AS lines
