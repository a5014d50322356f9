"""A missing server fails its tests; only an explicit switch skips them.

A test tier that quietly skips when its server is missing lets CI pass with
coordination (or Kafka) untested. So a fixture that cannot start its server
calls :func:`server_missing`, which fails the test, unless the tier was
turned off on purpose: ``VAKIT_TEST_ZOOKEEPER=off`` or ``VAKIT_TEST_KAFKA=off``
(then the test is skipped, and the skip says which variable did it).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["server_missing"]


def server_missing(variable: str, why: str) -> NoReturn:
    """Fail (or, when ``variable`` is ``off``, skip) a test whose server is missing."""
    if os.environ.get(variable, "").strip().lower() == "off":
        pytest.skip(f"{variable}=off: {why}")
    pytest.fail(
        f"{why}; install it (make os-deps) or set {variable}=off to skip this tier", pytrace=False
    )
