"""The roles' Galaxy platforms (meta/main.yml ``galaxy_info.platforms``) from the releases
preflight accepts (data/targets.yml ``supported``, acceldeploy.inventory.targets).

Galaxy names a release by ansible-lint's meta schema (``schemas/meta.json`` in ansible-lint):
Ubuntu and Debian by codename. A supported release that schema has no platform for (openEuler)
cannot be declared there; ``unexpressed`` names it and every role README lists it under
Requirements. ``python -m acceldeploy.docsgen.roledocs --write`` rewrites the platforms of every
meta/main.yml; a unit test (tests/unit/test_role_docs.py) keeps all of it in step.
"""

from __future__ import annotations

import re
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import targets

# (targets.yml id, version) -> (Galaxy platform, Galaxy version) as the schema spells them.
GALAXY: dict[tuple[str, str], tuple[str, str]] = {
    ("ubuntu", "22.04"): ("Ubuntu", "jammy"),
    ("ubuntu", "24.04"): ("Ubuntu", "noble"),
    ("debian", "11"): ("Debian", "bullseye"),
    ("debian", "12"): ("Debian", "bookworm"),
    ("debian", "13"): ("Debian", "trixie"),
}
# targets.yml ids (lower case) the schema has no platform for: supported, not declarable.
UNEXPRESSED_IDS = frozenset({"openeuler"})

COMMAND = "python -m acceldeploy.docsgen.roledocs --write"
_PLATFORMS_LINE = re.compile(r"^(?P<indent>[ ]+)platforms:[ ]*$")


def releases() -> list[tuple[str, tuple[str, str] | None]]:
    """Every supported release (its targets.yml name) with its Galaxy (platform, version),
    None where the schema has no platform for it; refuses a release in neither table."""
    found: list[tuple[str, tuple[str, str] | None]] = []
    for row in targets.table()["supported"]:
        key = (str(row["id"]).lower(), str(row["version"]))
        if key not in GALAXY and key[0] not in UNEXPRESSED_IDS:
            raise AcceldeployError(
                f"data/targets.yml supports {row['name']} but acceldeploy.docsgen.rolemeta has no "
                "Galaxy platform for it: add it to GALAXY (as ansible-lint's meta schema spells "
                "it) or its id to UNEXPRESSED_IDS"
            )
        found.append((str(row["name"]), GALAXY.get(key)))
    return found


def platforms() -> list[dict[str, Any]]:
    """``galaxy_info.platforms``: one entry per Galaxy platform, in targets.yml's order."""
    found: dict[str, list[str]] = {}
    for _, galaxy in releases():
        if galaxy:
            found.setdefault(galaxy[0], []).append(galaxy[1])
    return [{"name": name, "versions": versions} for name, versions in found.items()]


def unexpressed() -> list[str]:
    """The supported releases (targets.yml names) no Galaxy platform can declare."""
    return [name for name, galaxy in releases() if galaxy is None]


def platforms_block(indent: str) -> list[str]:
    """The ``platforms:`` key and its entries as meta/main.yml lines, at ``indent``."""
    inner = indent + "  "
    lines = [
        f"{indent}platforms:",
        f"{inner}# From tools/acceldeploy/data/targets.yml ({COMMAND}).",
    ]
    missing = unexpressed()
    if missing:
        also = "; ".join(missing)
        lines.append(f"{inner}# Also supported, with no platform in Galaxy's schema: {also}.")
    for entry in platforms():
        lines.append(f"{inner}- name: {entry['name']}")
        versions = ", ".join(
            v if re.fullmatch(r"[a-z]+", v) else f'"{v}"' for v in entry["versions"]
        )
        lines.append(f"{inner}  versions: [{versions}]")
    return lines


def render_meta(text: str) -> str:
    """meta/main.yml's text with its ``platforms:`` block (the key and every line indented
    deeper) replaced by ``platforms_block``; everything else is kept as it is."""
    lines = text.splitlines()
    matches = [(i, m) for i, line in enumerate(lines) if (m := _PLATFORMS_LINE.match(line))]
    if len(matches) != 1:
        raise AcceldeployError("needs one 'platforms:' line under galaxy_info (a block of its own)")
    start, match = matches[0]
    indent = match["indent"]
    end = start + 1
    while end < len(lines) and (
        not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip(" ")) > len(indent)
    ):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    new = lines[:start] + platforms_block(indent) + lines[end:]
    return "\n".join(new) + "\n"
