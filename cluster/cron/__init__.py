"""Schedule math, pure: the cron grammar, DST and intervals, the materializer's plan.

Nothing here does I/O; the leader loop that writes occurrences is
:mod:`cluster.leader.materializer`.
"""
