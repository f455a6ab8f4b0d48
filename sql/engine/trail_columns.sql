-- What a batch returns of the rows it deleted, after deleted, selected and last_tid: keys,
-- a JSON array of each row's key (the table's primary key, or the sweep's declared key: its
-- value, or for a key of several columns an array of their values), and lines, each row as a JSON object's text (every column of the swept table), for a
-- sweep that writes its deleted rows as JSON lines. {keys} and {lines} are NULL when not
-- wanted.
{keys} AS keys,
{lines} AS lines
