"""The generated parts of each role's README.md and meta/main.yml, of the inventory
reference (docs/reference/inventory.md: every service key, from service.KEYS), of the
stacks reference (docs/reference/stacks.md: the matrix and sources of versions/stacks.yml)
and the package's data taken from the roles (acceldeploy.docsgen.packagedata).

A README keeps its prose; only the blocks between ``<!-- BEGIN GENERATED: <name> -->`` and
``<!-- END GENERATED -->`` are rendered: ``variables`` from the role's meta/argument_specs.yml
(every entry point, each variable once) and ``platforms`` from data/targets.yml
(acceldeploy.docsgen.rolemeta). meta/main.yml's ``galaxy_info.platforms`` comes from the same
table.

    python -m acceldeploy.docsgen.roledocs --write  # regenerate every role (and missing READMEs)
    python -m acceldeploy.docsgen.roledocs --check  # exit 1 naming each stale file

A maintainer's command: it works on the checkout it is run in (the current directory or one
above it holding galaxy.yml and roles/).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.docsgen import packagedata, rolemeta
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import targets
from acceldeploy.planner import stackmatrix
from acceldeploy.serving import service

COMMAND = rolemeta.COMMAND
END = "<!-- END GENERATED -->"
BLOCK = re.compile(r"<!-- BEGIN GENERATED: (?P<name>[a-z_]+) -->\n.*?" + re.escape(END), re.S)
NOTE = "<!-- Generated from {source} by `{command}`: edit that, not this block. -->"
# What Markdown would read as markup in a table cell; an underscore only at a word's edge. A
# backslash before each, but `<` as `&lt;`: Python-Markdown (the docs site) keeps `\<` as is.
_MARKDOWN = re.compile(r"[\\|<*]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_ESCAPED = {"<": "&lt;"}
# Ansible's documentation markup for code-like values: C(...), V(...), O(...).
_ANSIBLE_CODE = re.compile(r"\b[CVO]\(([^()]*)\)")
SOURCES = {
    "variables": "meta/argument_specs.yml",
    "platforms": "tools/acceldeploy/data/targets.yml",
    "service_keys": "tools/acceldeploy/serving/service.py (KEYS, DEFAULTS)",
    "stack_matrix": "versions/stacks.yml (acceldeploy.planner.stackmatrix)",
    "stack_sources": "versions/stacks.yml (each stack's sources)",
    "stack_defects": "versions/stacks.yml (each stack's known_defects)",
}


def checkout(start: Path) -> Path:
    """The acceldeploy checkout at or above ``start``."""
    for directory in (start, *start.parents):
        if (directory / "galaxy.yml").is_file() and (directory / "roles").is_dir():
            return directory
    raise AcceldeployError(
        f"no acceldeploy checkout (galaxy.yml and roles/) at or above {start}: run it in one"
    )


def roles(roles_dir: Path) -> list[Path]:
    """Every role directory with an argument spec."""
    return sorted(p.parents[1] for p in roles_dir.glob("*/meta/argument_specs.yml"))


def argument_specs(role_dir: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text()) or {}
    specs = data.get("argument_specs")
    if not isinstance(specs, dict) or not specs:
        raise AcceldeployError(f"{role_dir / 'meta/argument_specs.yml'}: no argument_specs")
    return specs


def _prose(text: Any) -> str:
    """A description (str or list of str) as one Markdown table cell."""
    joined = " ".join(text) if isinstance(text, list) else str(text or "")
    parts = _ANSIBLE_CODE.split(" ".join(joined.split()))
    # split() with one group: even items are prose, odd ones the insides of C(...) and kin.
    return "".join(
        _code(part) if i % 2 else _MARKDOWN.sub(lambda m: _ESCAPED.get(m[0], "\\" + m[0]), part)
        for i, part in enumerate(parts)
    )


def _code(value: str) -> str:
    """A code span a table cell can hold on GitHub and on the docs site: GitHub needs a pipe
    in it escaped, and Python-Markdown would print that backslash, so such a span is HTML."""
    if "|" not in value:
        return "`" + value + "`"
    return "<code>" + html.escape(value, quote=False).replace("|", "&#124;") + "</code>"


def _default(option: dict[str, Any]) -> str:
    if option.get("required"):
        return "required"
    if "default" not in option:
        return "—"
    value = option["default"]
    if isinstance(value, str):
        return _code(value) if value else '`""`'
    return _code(json.dumps(value))


def _type(option: dict[str, Any]) -> str:
    kind = str(option.get("type", "str"))
    return f"{kind} of {option['elements']}" if "elements" in option else kind


def _description(option: dict[str, Any]) -> str:
    text = _prose(option.get("description"))
    if "choices" in option:
        choices = ", ".join(_code(str(c)) if c != "" else '`""`' for c in option["choices"])
        text += f" Choices: {choices}."
    if option.get("no_log"):
        text += " Secret: never logged."
    return text.strip()


def render_variables(specs: dict[str, dict[str, Any]]) -> str:
    """The entry points and every variable once (the first entry point's definition)."""
    first = next(iter(specs))
    lines = ["| Entry point | Purpose |", "|---|---|"]
    for name, spec in specs.items():
        purpose = _prose(spec.get("short_description"))
        if name != first and spec == specs[first]:
            purpose = f"Same argument spec as `{first}`."
        lines.append(f"| `{name}` | {purpose} |")
    options: dict[str, dict[str, Any]] = {}
    takers: dict[str, list[str]] = {}
    for name, spec in specs.items():
        for variable, option in (spec.get("options") or {}).items():
            options.setdefault(variable, option or {})
            takers.setdefault(variable, []).append(name)
    every = all(len(t) == len(specs) for t in takers.values())
    lines.append("")
    if not options:
        lines.append("No variables.")
        return "\n".join(lines)
    if len(specs) == 1:
        lines.append(f"`{first}` takes {len(options)} variables.")
    elif every:
        lines.append(f"Every entry point takes the same {len(options)} variables.")
    else:
        lines.append(
            f"{len(options)} variables; the last column says which entry points take each."
        )
    head = "| Variable | Type | Default | Description |"
    rule = "|---|---|---|---|"
    if not every:
        head, rule = head + " Entry points |", rule + "---|"
    if any(_default(option) == "—" for option in options.values()):
        lines += ["", "A default of — is worked out per host; the description says from what."]
    lines += ["", head, rule]
    for variable, option in options.items():
        row = f"| `{variable}` | {_type(option)} | {_default(option)} | {_description(option)} |"
        if not every:
            row += " " + ", ".join(f"`{t}`" for t in takers[variable]) + " |"
        lines.append(row)
    return "\n".join(lines)


def render_platforms() -> str:
    """The supported releases, and which of them meta/main.yml can declare."""
    minimums = targets.table()["minimums"]
    lines = [
        "Hosts run a release from `tools/acceldeploy/data/targets.yml`; preflight refuses any "
        "other (unless `acceldeploy_allow_untested_os: true`) and any host below systemd "
        f"{minimums['systemd']} or without Python {minimums['python']} to "
        f"{minimums['python_max']}.",
        "",
        "| Release | Galaxy platform (`meta/main.yml`) |",
        "|---|---|",
    ]
    for name, galaxy in rolemeta.releases():
        where = (
            f"{galaxy[0]} `{galaxy[1]}`"
            if galaxy
            else "none: ansible-lint's Galaxy schema has no such platform"
        )
        lines.append(f"| {_prose(name)} | {where} |")
    return "\n".join(lines)


def render_service_keys() -> str:
    """Every key of an acceldeploy_services entry: its type, default and meaning."""
    lines = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for key, (kind, meaning) in service.KEYS.items():
        default = service.DEFAULTS.get(key)
        shown = "—" if default in (None, {}) else _code(json.dumps(default))
        lines.append(f"| `{key}` | {_prose(kind)} | {shown} | {_prose(meaning)} |")
    return "\n".join(lines)


def sections(role_dir: Path) -> dict[str, str]:
    return {
        "platforms": render_platforms(),
        "variables": render_variables(argument_specs(role_dir)),
    }


def _block(name: str, body: str) -> str:
    note = NOTE.format(source=SOURCES[name], command=COMMAND)
    return f"<!-- BEGIN GENERATED: {name} -->\n{note}\n\n{body}\n\n{END}"


def splice(text: str, rendered: dict[str, str], where: str = "README.md") -> str:
    """``text`` with each generated block replaced; every block of ``rendered`` must be
    there exactly once, and no other."""
    seen: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in rendered:
            raise AcceldeployError(f"{where}: unknown generated block {name!r}")
        seen.append(name)
        return _block(name, rendered[name])

    result = BLOCK.sub(replace, text)
    for name in rendered:
        if seen.count(name) != 1:
            raise AcceldeployError(
                f"{where}: needs one '<!-- BEGIN GENERATED: {name} -->' ... '{END}' block "
                f"(found {seen.count(name)})"
            )
    return result


def skeleton(role_dir: Path) -> str:
    """A new role's README, in the shape of the others; its prose is to be written."""
    meta = yaml.safe_load((role_dir / "meta" / "main.yml").read_text()) or {}
    about = " ".join(str(meta.get("galaxy_info", {}).get("description", "")).split())
    role = role_dir.name
    return "\n".join(
        [
            f"# {role}",
            "",
            about,
            "",
            "## Requirements",
            "",
            _block("platforms", ""),
            "",
            "## Role Variables",
            "",
            _block("variables", ""),
            "",
            "## Dependencies",
            "",
            "None.",
            "",
            "## Example Playbook",
            "",
            "```yaml",
            f"- name: {role}",
            "  hosts: all",
            "  roles:",
            f"    - role: {role}",
            "```",
            "",
            "## License",
            "",
            "Apache-2.0",
            "",
        ]
    )


def expected(role_dir: Path) -> dict[Path, str]:
    """Each generated file of the role -> what it should hold."""
    readme = role_dir / "README.md"
    text = readme.read_text() if readme.exists() else skeleton(role_dir)
    meta = role_dir / "meta" / "main.yml"
    where = str(readme.relative_to(role_dir.parent.parent))
    return {
        readme: splice(text, sections(role_dir), where),
        meta: rolemeta.render_meta(meta.read_text()),
    }


def references(repo: Path) -> dict[Path, dict[str, str]]:
    """The reference pages with generated blocks -> {block: what it holds}."""
    stacks = stackmatrix.matrix()
    return {
        repo / "docs" / "reference" / "inventory.md": {"service_keys": render_service_keys()},
        repo / "docs" / "reference" / "stacks.md": {
            "stack_matrix": stackmatrix.markdown_matrix(stacks),
            "stack_sources": stackmatrix.markdown_sources(stacks),
            "stack_defects": stackmatrix.markdown_defects(stacks),
        },
    }


def stale(roles_dir: Path) -> dict[Path, str]:
    """The files that differ from what they should hold -> that text."""
    found: dict[Path, str] = {}
    for reference, blocks in references(roles_dir.parent).items():
        if reference.exists():
            text = reference.read_text()
            wanted = splice(text, blocks, str(reference))
            if wanted != text:
                found[reference] = wanted
    generated = packagedata.expected(roles_dir.parent)
    for role_dir in roles(roles_dir):
        generated.update(expected(role_dir))
    for path, text in generated.items():
        if not path.exists() or path.read_text() != text:
            found[path] = text
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acceldeploy.docsgen.roledocs", description=__doc__
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate every role's files")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each stale file")
    parser.add_argument("--roles-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        roles_dir = (args.roles_dir or checkout(Path.cwd()) / "roles").resolve()
        found = stale(roles_dir)
    except AcceldeployError as exc:
        print(f"roledocs: {exc}", file=sys.stderr)
        return 2
    for path, text in found.items():
        shown = path.relative_to(roles_dir.parent)
        if args.write:
            path.write_text(text)
            print(f"wrote {shown}")
        else:
            print(f"{shown} is stale: run `{COMMAND}`", file=sys.stderr)
    return 1 if found and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
