"""What a check found: one row of the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from acceldeploy.secrets import mask

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass
class Check:
    host: str
    name: str
    status: Status
    detail: str = ""
    fix: str = ""
    service: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # What a host or a server answered is shown as is, but never a credential in it.
        self.detail, self.fix = mask(self.detail), mask(self.fix)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def passed(checks: list[Check]) -> bool:
    return all(c.status != "fail" for c in checks)
