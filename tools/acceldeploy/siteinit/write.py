"""The inventory directory `acceldeploy init` writes: the skeletons (acceldeploy/skeletons/
inventory/, the repository's top-level templates/) rendered with what draft.py decided, into a
new directory beside the target that replaces nothing unless asked, then renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from acceldeploy import yamltext
from acceldeploy.downloads.fetchlock import put_in_place

SKELETONS = Path(__file__).resolve().parent.parent / "skeletons" / "inventory"


def to_yaml(value: Any) -> str:
    return yamltext.dump(value).rstrip()


def render(context: Mapping[str, Any]) -> dict[str, str]:
    """{relative path: text} of every skeleton."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SKELETONS),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = to_yaml
    out = {}
    for template in sorted(SKELETONS.rglob("*.j2")):
        relative = template.relative_to(SKELETONS).as_posix()
        text = env.get_template(relative).render(**context)
        out[relative.removesuffix(".j2")] = text.rstrip() + "\n"
    return out


def write(out: Path, files: Mapping[str, str], force: bool) -> None:
    """The files into `out`, whole or not at all."""
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pick another site name, or --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        os.chmod(staging, 0o755)
        put_in_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
