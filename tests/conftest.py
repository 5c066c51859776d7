"""Suite-wide collection rules.

CI's pass (`make test`) must stay well under half an hour on a 2-core
machine, so the longest parametrized slow suites (marker `ci_half`) run
every other case there, in collection order, and all of them in `make
test-full` (SPINDLE_TEST_FULL=1). The cases left out are reported as
skipped, with that reason, so nothing is dropped silently."""
import os

import pytest

FULL = bool(os.environ.get("SPINDLE_TEST_FULL"))


def pytest_collection_modifyitems(config, items):
    if FULL:
        return
    seen = {}
    skip = pytest.mark.skip(reason="every other case of this suite runs in CI's "
                                   "pass; make test-full runs them all")
    for item in items:
        if item.get_closest_marker("ci_half") is None:
            continue
        key = (item.module.__name__ if item.module else "", item.originalname)
        n = seen.get(key, 0)
        seen[key] = n + 1
        if n % 2:
            item.add_marker(skip)
