"""The data shipped with the package: its directories (the pinned stacks, the JSON schemas) and
the loader of its YAML tables (platforms, model catalog)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).parent / "data"
VERSIONS_DIR = DATA_DIR / "versions"
SCHEMAS_DIR = DATA_DIR / "schemas"


@cache
def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DATA_DIR / f"{name}.yml").read_text())
    assert isinstance(data, dict), name
    return data
