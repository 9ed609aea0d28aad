"""The writer's loop: the leader (fetch, decide, append, ack, relay), its batches, failure handling,
the stuck alarm, the liveness tick and the loop's metrics."""
