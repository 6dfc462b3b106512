"""The package's data generated from the roles, so that an installed wheel needs no roles/:
data/role-defaults.yml, every role's defaults/main.yml that acceldeploy.inventory.roledefaults
reads. (The vllm_service templates the package renders need no copy: the package holds them
and the role's templates are symlinks to them.) ``roledocs --write`` rewrites it, ``--check``
and tests/unit/test_role_docs.py name it when it is stale.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from acceldeploy import yamltext
from acceldeploy.docsgen.rolemeta import COMMAND
from acceldeploy.inventory.roledefaults import DEFAULTS, ROLES

# The package's data in the repository (pyproject.toml: the package lives in tools/).
DATA = Path("tools", "acceldeploy", "data")
HEADER = (
    "# Generated from roles/<role>/defaults/main.yml by\n"
    "# `{command}`: edit those, not this file.\n"
)


def render_defaults(roles_dir: Path) -> str:
    """{role: its defaults/main.yml} of every role whose defaults the package reads."""
    defaults = {
        role: yaml.safe_load((roles_dir / role / "defaults" / "main.yml").read_text()) or {}
        for role in ROLES
    }
    return HEADER.format(command=COMMAND) + yamltext.dump(defaults)


def expected(repo: Path) -> dict[Path, str]:
    """Each generated data file of the package in ``repo`` -> what it should hold; nothing
    when ``repo`` does not hold the package."""
    if not (repo / DATA).is_dir():
        return {}
    return {repo / DATA / f"{DEFAULTS}.yml": render_defaults(repo / "roles")}
