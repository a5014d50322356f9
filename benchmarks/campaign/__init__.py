"""The fault campaign (issue 46): a real local cluster under steady load
while a nemesis injects mixed faults at random from a seed, a history of
every operation and every firing, and a checker that reads it.

``python -m benchmarks.campaign --duration 600 --out DIR [--seed N]`` (or
``make campaign``) runs one and writes ``DIR/verdict.json``. The history files, ``final.json`` (each acknowledged job's status in the
shards at the end) and the processes' logs stay in ``DIR``. The modules:

* :mod:`~benchmarks.campaign.history`: the records (operations, firings,
  faults) and their JSON-lines files;
* :mod:`~benchmarks.campaign.checker`: the verdict, pure, from a history;
* :mod:`~benchmarks.campaign.target`: the HTTP target that notes every firing;
* :mod:`~benchmarks.campaign.nodes`: the cluster (shards, ZooKeeper, proxies,
  workers under libfaketime, API processes);
* :mod:`~benchmarks.campaign.steadysleep`: the workers' entry point, which
  keeps ``time.sleep`` working under libfaketime;
* :mod:`~benchmarks.campaign.nemesis`: the faults and their seeded schedule;
* :mod:`~benchmarks.campaign.load`: the client load through the API;
* :mod:`~benchmarks.campaign.run`: the whole run, start to verdict.
"""

from __future__ import annotations
