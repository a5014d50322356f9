"""The worker: claim due jobs, hold them until due, fire, complete in batches."""
