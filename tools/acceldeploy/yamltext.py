"""YAML text as this repository writes it: keys in the order given, block style, and lists
indented under their key (the example inventories' style, and yamllint's in ansible-lint)."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
