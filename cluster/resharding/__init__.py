"""Growing and shrinking a running cluster: the slot map, the mover, adding a shard."""
