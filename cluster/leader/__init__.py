"""The per-shard leader loops: cron materializer, far→near mover, lease reaper,
history janitor, backlog probe. Leadership only saves work: each loop is safe
when two processes run it at once."""
