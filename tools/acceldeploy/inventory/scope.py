"""What a task of a role sees on one host, read on demand: the role's contract asks it for each
variable by name, and the adapter (the role's action, or preflight's one pass) answers with the
value templated as that task would see it. Nothing here imports Ansible."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import bounds


class Scope:
    """One host's variables as its role's task sees them (role defaults, the inventory, the
    facts set so far, role vars); `read(name)` raises KeyError for an undefined one."""

    def __init__(
        self,
        host: str,
        read: Callable[[str], Any],
        hostvars: Mapping[str, Mapping[str, Any]],
        groups: Mapping[str, Sequence[str]],
    ) -> None:
        self.host = host
        self._read = read
        self._hostvars = hostvars
        self._groups = groups

    @classmethod
    def of_values(
        cls,
        host: str,
        values: Mapping[str, Any],
        hostvars: Mapping[str, Mapping[str, Any]] | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> Scope:
        """A scope over plain values (nothing left to template)."""
        return cls(host, values.__getitem__, hostvars or {}, groups or {})

    def __getitem__(self, name: str) -> Any:
        try:
            return self._read(name)
        except KeyError:
            raise AcceldeployError(f"{self.host}: {name} is not defined") from None

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self._read(name)
        except KeyError:
            return default

    def flag(self, name: str, unset: bool | None = None) -> bool:
        """A true/false variable, read as bounds.flag reads one; `unset` given: its value when
        the variable is undefined or null (an extra variable such as acceldeploy_offline)."""
        if unset is not None and self.get(name) is None:
            return unset
        return bounds.flag(self[name], name)

    def fields(self, prefix: str, names: Sequence[str]) -> dict[str, Any]:
        """{name: <prefix>_<name>} for each name."""
        return {name: self[f"{prefix}_{name}"] for name in names}

    def group(self, name: str) -> list[str]:
        """The hosts of an inventory group ([] for none)."""
        return [str(h) for h in self._groups.get(name) or ()]

    @property
    def inventory(self) -> Mapping[str, Mapping[str, Any]]:
        """Every host's variables (hostvars), by host."""
        return self._hostvars

    def of(self, host: str) -> Mapping[str, Any]:
        """Another host's variables (the inventory's and its facts), as hostvars gives them."""
        return self._hostvars[host]

    def at(self, host: str) -> Scope:
        """Another host of the inventory, read from its variables as hostvars gives them (the
        inventory's and its facts; no role's defaults)."""
        return Scope(host, self._hostvars[host].__getitem__, self._hostvars, self._groups)

    def hosts(self, names: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """{host: its variables} of the named hosts the inventory holds."""
        return {n: self._hostvars[n] for n in names if n in self._hostvars}
