"""``vakit-bench``: the benchmarks as one installed command.

    vakit-bench wave [...]        the round-hour wave on a cluster it starts
    vakit-bench sustained [...]   the steady profile on a cluster it starts
    vakit-bench doors [...]       a front door's wave between COPYed ones: drain ratios
    vakit-bench reshard [...]     add a shard, rebalance and drain under load; audit every firing
    vakit-bench remote --api-url URL --token T [...]
                                  a wave against a running cluster, through its API

``vakit-bench COMMAND --help`` lists each one's options.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["main"]


def _commands() -> dict[str, Callable[[list[str]], int]]:
    from benchmarks import doors, remote, reshard, sustained, wave

    return {
        "wave": wave.main,
        "sustained": sustained.main,
        "doors": doors.main,
        "remote": remote.main,
        "reshard": reshard.main,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    commands = _commands()
    if not args or args[0] in ("-h", "--help") or args[0] not in commands:
        print(__doc__.strip(), file=sys.stderr if args and args[0] not in ("-h", "--help") else sys.stdout)
        return 0 if args and args[0] in ("-h", "--help") else 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
