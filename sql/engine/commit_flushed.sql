-- In the batch that ends a heap's sweep (it came back with fewer rows than its limit): its
-- commit waits for its WAL flush on this server, so that the rows of the whole run are known
-- durable at once (docs/metrics.md); the other batches commit without waiting.
SET LOCAL synchronous_commit = local
