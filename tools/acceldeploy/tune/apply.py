"""`tune.py --apply`: the winner's keys written into the vars file that defines the host's
`acceldeploy_services` (its host_vars, else its groups', else all), changing only those keys
and keeping every comment and the file's layout (ruamel.yaml round trip). The diff is shown;
the next `site.yml` deploys it."""

from __future__ import annotations

import difflib
import io
from pathlib import Path
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.tune.space import landings

VAR = "acceldeploy_services"


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def root(inventory: Path) -> Path:
    """Where Ansible looks for host_vars/ and group_vars/: inside an inventory directory,
    beside an inventory file."""
    return inventory if inventory.is_dir() else inventory.parent


def vars_files(inventory: Path, host: str, groups: list[str]) -> list[Path]:
    """Where Ansible reads this host's variables from, most specific first."""
    root_dir = root(inventory)
    found: list[Path] = []
    for kind, name in [("host_vars", host), *(("group_vars", g) for g in groups)]:
        base = root_dir / kind / name
        found += [p for p in (base.with_suffix(".yml"), base.with_suffix(".yaml")) if p.is_file()]
        if base.is_dir():
            found += sorted(base.glob("*.y*ml"))
    return found


def defining_file(inventory: Path, host: str, groups: list[str]) -> Path:
    for path in vars_files(inventory, host, groups):
        data = _yaml().load(path.read_text())
        if isinstance(data, dict) and VAR in data:
            return path
    raise AcceldeployError(
        f"--apply: no host_vars or group_vars file of {host} under {root(inventory)} defines "
        f"{VAR}; move it into {root(inventory) / 'host_vars' / host}.yml (or a group_vars "
        "file), or drop --apply and paste winner.yml's entry by hand"
    )


def target(inventory: Path, host: str, groups: list[str], service: str) -> Path:
    """The file --apply writes the winner into, checked before the search: it defines the
    host's services, the one tuned among them."""
    path = defining_file(inventory, host, groups)
    try:
        apply_point(path.read_text(), service, {})
    except AcceldeployError as exc:
        raise AcceldeployError(f"{exc} ({path})") from None
    return path


def _set(mapping: Any, key: str, value: Any) -> None:
    """Set a key. A new one goes last, and the comment block that followed the old last key
    (beyond its own end-of-line comment) moves below it; when the last value is a mapping
    (the block is inside it), the new key goes in before that one."""
    if key in mapping or not mapping:
        mapping[key] = value
        return
    last = list(mapping)[-1]
    if isinstance(mapping[last], dict) and mapping[last]:
        # the comment block sits inside that last mapping: go in before it
        mapping.insert(len(mapping) - 1, key, value)
        return
    mapping[key] = value
    comments = mapping.ca.items.get(last)
    token = comments[2] if comments and len(comments) > 2 else None
    if token is None or "\n" not in token.value.rstrip("\n"):
        return
    eol, _, rest = token.value.partition("\n")
    token.value = eol + "\n"
    from ruamel.yaml.tokens import CommentToken

    mapping.ca.items[key] = [None, None, CommentToken("\n" + rest, token.start_mark, None), None]


def apply_point(text: str, service: str, point: dict[str, Any]) -> str:
    """The vars file's text with the service's entry carrying the point's keys."""
    yaml = _yaml()
    data = yaml.load(text)
    entries = data.get(VAR) or []
    entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == service), None)
    if entry is None:
        raise AcceldeployError(f"--apply: {VAR} in this file has no service named {service}")
    for section, key, value in landings(point):
        if section is None:
            _set(entry, key, value)
            continue
        if section not in entry or entry[section] is None:
            from ruamel.yaml.comments import CommentedMap

            _set(entry, section, CommentedMap())
        _set(entry[section], key, value)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def diff(before: str, after: str, path: Path) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"{path} (before)", f"{path}"
        )
    )
