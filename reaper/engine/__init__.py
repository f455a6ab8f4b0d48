"""One sweep run: the batches, their sizes, pacing, partitions and the interlock."""
