"""Every path of this repository that the docs, the roles, the playbooks, the plugins and the
package and the lab (lab/) name in their text exists: a file moved or renamed takes its mentions with it. Paths
of upstream repositories the docs cite (vllm-ascend's and vllm-gaudi's docs, ansible-lint's
schema) are not ours and are left out by name. CHANGELOG.md keeps the names of its time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ("README.md", "docs/**/*.md", "roles/**/*.yml", "roles/**/*.md", "roles/**/*.j2",
         "playbooks/**/*.yml", "site.yml", "plugins/**/*.py", "tools/**/*.py",
         "lab/acceldeploy_lab/**/*.py", "Makefile")  # fmt: skip
TOP = "tools|lab|tests|roles|playbooks|plugins|docs|inventory|versions|schemas"
# A path of ours: from a top-level directory to a file name with one of these extensions.
PATH = re.compile(rf"(?<![\w/.-])((?:{TOP})/[\w.{{}},/-]*\.(?:py|yml|md|j2|json|txt))\b")
# Upstream repositories' files, cited with their repository (docs/reference/stacks.md).
UPSTREAM = ("docs/source/", "docs/configuration/", "docs/getting_started/",
            "docs/release_notes.md", "schemas/meta.json")  # fmt: skip
# Files the tools write and git ignores (.gitignore): `tools/lab.py up` writes the lab's hosts.
GENERATED = ("inventory/lab/hosts.yml",)


def expanded(path: str) -> list[str]:
    """`a/{b,c}.py` -> a/b.py, a/c.py."""
    found = re.search(r"\{([^{}]*)\}", path)
    if not found:
        return [path]
    head, tail = path[: found.start()], path[found.end() :]
    return [p for alt in found.group(1).split(",") for p in expanded(head + alt + tail)]


def mentions() -> Iterator[tuple[str, str]]:
    for pattern in TEXTS:
        for file in sorted(ROOT.glob(pattern)):
            if "__pycache__" in file.parts or not file.is_file():
                continue
            for number, line in enumerate(file.read_text(errors="ignore").splitlines(), 1):
                for match in PATH.finditer(line):
                    for path in expanded(match.group(1)):
                        yield f"{file.relative_to(ROOT)}:{number}", path


def test_every_path_named_in_the_text_exists() -> None:
    missing = [f"{where}: {path}" for where, path in mentions()
               if not path.startswith(UPSTREAM) and path not in GENERATED
               and not (ROOT / path).exists()]  # fmt: skip
    assert not missing, "\n".join(missing)


def test_generated_files_are_git_ignored() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert all(path in ignored for path in GENERATED)


def test_the_check_finds_paths() -> None:
    assert len({path for _, path in mentions()}) > 100
    assert expanded("tools/acceldeploy/{a,b}.py") == [
        "tools/acceldeploy/a.py",
        "tools/acceldeploy/b.py",
    ]
