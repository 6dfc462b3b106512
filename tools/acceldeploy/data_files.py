"""Loaders for the YAML data shipped with the package (platforms, model catalog)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).parent / "data"


@cache
def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DATA_DIR / f"{name}.yml").read_text())
    assert isinstance(data, dict), name
    return data
