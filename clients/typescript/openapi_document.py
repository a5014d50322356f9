"""Print the API's OpenAPI document, as a running API serves it at
``/openapi.json``, without starting one: ``make ts-client`` generates the
TypeScript types from it. The document does not depend on the store or the
deployment's settings (tests/integration/test_typescript_client.py compares
the types with a live API's document), so an in-memory store and the
default settings serve."""

from __future__ import annotations

import json
import sys

from cluster.api.app import create_app
from cluster.config import Settings
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore


def main() -> None:
    store = MemStore(1)
    settings = Settings(shards=["host=127.0.0.1 dbname=vakit"])
    app = create_app(settings, store=store, crons=MemCronStore(store))
    json.dump(app.openapi(), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
