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


def task_scope(variables: Mapping[str, Any], templar: Any, host: str = "") -> Scope:
    """The Scope of a task that sees `variables` (its task_vars) on `host` (else its
    inventory_hostname), each read templated with a copy of the action's own Ansible templar."""
    from ansible.template import trust_as_template

    own = templar.copy_with_new_env(available_variables=variables)

    def read(name: str) -> Any:
        if name not in variables:
            raise KeyError(name)
        return plain(own.template(trust_as_template("{{ " + name + " }}")))

    return Scope(
        host or str(variables.get("inventory_hostname")), read,
        variables.get("hostvars") or {}, variables.get("groups") or {},
    )  # fmt: skip


def error_message(exc: BaseException) -> str:
    """A check's own words from what Ansible raised: the innermost AcceldeployError's text
    (our filters and contracts raise one), else Ansible's own message (not masked)."""
    from ansible.errors import AnsibleError

    text = ""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AcceldeployError):
            text = str(seen)
            break
        if isinstance(seen, AnsibleError):
            text = str(getattr(seen, "_original_message", "") or seen.message)
        seen = seen.__cause__ or seen.__context__
    return text.strip() or str(exc)
