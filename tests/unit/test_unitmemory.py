"""A unit's memory as node exporter's textfile collector reads it (acceldeploy.host.unitmemory,
also bench's memory source on cpu): the exposition passes promtool's own `check metrics`, a
unit that is not running is left out, and the file is replaced atomically."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from acceldeploy.host import unitmemory

READINGS = {"qwen3-vl.service": {"pss_mib": 1536.5, "rss_mib": 2048.0, "cgroup_mib": 2300.25},
            "stopped.service": {"pss_mib": 0.0, "rss_mib": 0.0}}  # fmt: skip


def test_each_running_units_memory_in_bytes_by_source() -> None:
    text = unitmemory.exposition(READINGS)
    assert 'acceldeploy_service_memory_bytes{service="qwen3-vl",source="pss"} 1611137024' in text
    assert 'acceldeploy_service_memory_bytes{service="qwen3-vl",source="cgroup"} 2411986944' in text
    assert "stopped" not in text


@pytest.mark.skipif(not shutil.which("promtool"), reason="no promtool (make host-deps)")
def test_promtool_reads_the_exposition() -> None:
    check = subprocess.run(["promtool", "check", "metrics"], input=unitmemory.exposition(READINGS),
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_textfile_is_replaced_whole(tmp_path: Path) -> None:
    unitmemory.write_textfile(tmp_path, "a 1\n")
    unitmemory.write_textfile(tmp_path, "a 2\n")
    assert [p.name for p in tmp_path.iterdir()] == [unitmemory.TEXTFILE]
    assert (tmp_path / unitmemory.TEXTFILE).read_text() == "a 2\n"
