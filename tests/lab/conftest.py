"""Under `make test` (ACCELDEPLOY_REQUIRE_LAB=1) a lab test that skips is a failure: the
lab is up there, so a skip would hide a missing piece."""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("ACCELDEPLOY_REQUIRE_LAB") == "1":
        report.outcome = "failed"
        report.longrepr = f"skipped under ACCELDEPLOY_REQUIRE_LAB=1: {report.longrepr}"


# The one real venv build of the run (python_env's test, on every lab host) goes first: the
# tests after it that need vLLM on a host find that build and keep it (a no-op), instead of
# each building the ~8 GB environment again.
FIRST = ("test_python_env.py",)
# Upgrades leave the hosts on other environments, and the isolated lab replaces them: after
# everything else (`make test-slow`). The stack change goes first of them: it ends on the lab
# inventory's stack with its own builds pruned, so the pins upgrade has the disk it needs.
LAST = ("test_stack_upgrade_lab.py", "test_upgrade_lab.py", "test_bundle_isolated.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def place(item: pytest.Item) -> tuple[bool, int]:
        name = item.path.name
        return name not in FIRST, LAST.index(name) + 1 if name in LAST else 0

    items.sort(key=place)
