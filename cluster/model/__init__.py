"""The model of the kernel: jobs and cron jobs, their records and the
parameter objects of the store seam (:mod:`.jobs`, :mod:`.crons`, :mod:`.operator`,
:mod:`.calendars`, :mod:`.limits`).

Everything is re-exported here: callers import from ``cluster.model``.
"""

from __future__ import annotations

from cluster.model.calendars import *  # noqa: F403
from cluster.model.calendars import __all__ as _calendars
from cluster.model.crons import *  # noqa: F403
from cluster.model.crons import __all__ as _crons
from cluster.model.jobs import *  # noqa: F403
from cluster.model.jobs import __all__ as _jobs
from cluster.model.limits import *  # noqa: F403
from cluster.model.limits import __all__ as _limits
from cluster.model.operator import *  # noqa: F403
from cluster.model.operator import __all__ as _operator

__all__ = [*_jobs, *_crons, *_operator, *_calendars, *_limits]
