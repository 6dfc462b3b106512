"""acceldeploy-lab: the lab to try acceldeploy on, its own distribution (lab/pyproject.toml)
beside the product's: local Debian hosts (systemd-nspawn), the caches, mirrors and wheel server
they use, and the maintainer commands that record a new serving stack. It adds `acceldeploy lab`
(acceldeploy_lab.command, through the acceldeploy.commands entry point); nothing of acceldeploy
imports it.

Where things are, for the lab's own processes: a helper server or a host's supervisor runs
``python -m acceldeploy_lab.<module>``, some under another venv's interpreter (olah's, the
labenv's), with PYTHONPATH naming the directories both packages are imported from. This file
imports nothing at import time but os and pathlib: such an interpreter imports it first."""

from __future__ import annotations

import os
from pathlib import Path

# lab/, the distribution's directory, and the repository it belongs to (the lab works on a
# checkout: its inventory/lab, versions/, tests/data).
LAB_DIR = Path(__file__).resolve().parents[1]
REPO = LAB_DIR.parent


def pythonpath(extra: str | None = None) -> str:
    """PYTHONPATH for a child interpreter: where acceldeploy and acceldeploy_lab are imported
    from here (tools/ and lab/ in a checkout), then ``extra``."""
    import acceldeploy

    tools = Path(acceldeploy.__file__).resolve().parents[1]
    dirs = [str(tools), str(LAB_DIR), *([extra] if extra else [])]
    return os.pathsep.join(dict.fromkeys(dirs))
