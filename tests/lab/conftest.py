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
