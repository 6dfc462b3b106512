"""What every filter plugin of ours needs: Ansible's data as plain Python going in, and an
AcceldeployError coming out as the AnsibleFilterError that fails the task with its message."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.scope import Scope


def plain(value: Any) -> Any:
    """Ansible's tagged / lazy containers turned into plain Python data."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def guard(func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        from ansible.errors import AnsibleFilterError

        try:
            return func(*args, **kwargs)
        except AcceldeployError as exc:
            raise AnsibleFilterError(str(exc)) from None

    wrapped.__name__ = func.__name__
    wrapped.__doc__ = func.__doc__
    return wrapped


def filters(*funcs: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """A FilterModule's map: each function under its own name, errors as Ansible's."""
    return {f.__name__: guard(f) for f in funcs}


def task_scope(host: str, variables: Mapping[str, Any], templar: Any) -> Scope:
    """The Scope of a task on `host` that sees `variables` (its task_vars), each read templated
    with Ansible's templar (which the caller has, as it runs inside Ansible)."""
    from ansible.template import trust_as_template

    def read(name: str) -> Any:
        if name not in variables:
            raise KeyError(name)
        return plain(templar.template(trust_as_template("{{ " + name + " }}")))

    return Scope(host, read, variables.get("hostvars") or {}, variables.get("groups") or {})
