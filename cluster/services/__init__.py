"""The service layer: the rules of Vakit's operations, below HTTP.

Creating a job (its checks, the near/far decision, the failover of a
keyless job to another shard), defining and changing a cron, and what
operators do with jobs and crons live here, once. The API's routes, the
web console and the CLI's local paths call these functions; a route only
translates HTTP (parses a request, calls a service, maps the result or the
error to a response). No web framework is imported here (import-linter).

- :mod:`.context`: what a service needs (:class:`~.context.Services`),
- :mod:`.jobs`, :mod:`.job_actions`: one-shot jobs,
- :mod:`.crons`, :mod:`.cron_actions`: cron jobs,
- :mod:`.insight`: what operators read of the cluster (start lateness),
- :mod:`.readiness`: whether every shard can serve (`/readyz`),
- :mod:`.checks`: the create-time checks of a target and a payload,
- :mod:`.batches`: many items written with one call per shard,
- :mod:`.documents`, :mod:`.job_document`, :mod:`.cron_document`: what
  users write (targets, times, a job, a cron), validated with pydantic,
- :mod:`.quotas`: per-owner admission.

The one cron definition type is :class:`cluster.model.CronDefinition`; its
builder, :func:`cluster.cron.definition.build_cron`, is pure schedule math.
"""

from __future__ import annotations

__all__: list[str] = []
