"""The store's contracts, one per role that calls it (STYLE.md item 17).

- :mod:`.intake`: the API's job writes and reads (create, get, change).
- :mod:`.claims`: the worker's claims, heartbeats and completions.
- :mod:`.upkeep`: the leader loops' passes (reaper, mover, janitor).
- :mod:`.insight`: the operator's reads (search, lateness, readiness).
- :mod:`.cron_intake`: the API's cron definitions and actions.
- :mod:`.calendars`: each shard's copy of the calendars crons follow.
- :mod:`.cron_upkeep`: the materializer's and janitor's cron passes.
- :mod:`.moves`: the slot mover's fence, barrier, copy and clean (issue 42).
- :mod:`.readings`: the few shard readings more than one role takes.
- :mod:`.sharded`: what every contract has (the shard count; open and close).
- :mod:`.api`: the API's union of intake and insight.

This package's ``__init__`` imports none of them on purpose: a caller that
imports its role's module imports that role only, and import-linter
(pyproject.toml) holds each caller to its roles.
"""
