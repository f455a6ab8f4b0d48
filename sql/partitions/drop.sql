-- Drop a partition that is already detached: no longer part of the swept table, so this
-- locks nothing that its readers or writers use.
DROP TABLE {partition}
