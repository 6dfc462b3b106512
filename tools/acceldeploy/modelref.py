"""What a service says about its model, parsed in one place, and where that model lives.

A service (``acceldeploy_services[i]``) names its model with four keys:

- ``model``: the hub id, ``org/name``;
- ``source``: ``hf`` (Hugging Face or a mirror of it) or ``modelscope``; default ``hf``;
- ``revision``: a commit id, branch or tag; none means the hub's default branch
  (``DEFAULT_REVISION``: ``main`` on Hugging Face, ``master`` on ModelScope);
- ``allow_patterns``: glob patterns of the files to fetch (a string is one pattern); none
  means every file.

``parse_model_ref`` checks all four and fails naming the variable; ``model_dir`` is the one
rule for the published directory, ``<root>/<org>/<name>@<revision or main>``: the path the
vLLM unit gets and the directory model_weights publishes. Without a revision the directory
is ``@main`` whatever the source (the name on disk predates per-source default branches).

This file is also shipped to the hosts inside the model_weights_fetch module (the collection's
module_utils: ``ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy``), so it
imports only the standard library and ``.errors``, relatively, and keeps to Python 3.9.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import AcceldeployError

SOURCES = ("hf", "modelscope")
DEFAULT_SOURCE = "hf"
DEFAULT_REVISION = {"hf": "main", "modelscope": "master"}
# The revision in the directory name of a model asked without one, whatever its source.
DIR_REVISION = "main"
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,254}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class ModelRefError(AcceldeployError):
    """A service's model keys are wrong; the message names the variable and what to set."""


def label(var: str, index: int, name: Any = None) -> str:
    """How messages name one service: ``acceldeploy_services[2] (qwen)``."""
    where = f"{var}[{index}]"
    return f"{where} ({name})" if isinstance(name, str) and name else where


def parse_model(value: Any, where: str) -> str:
    if not isinstance(value, str) or not MODEL_RE.match(value):
        raise ModelRefError(f"{where}.model must look like 'org/name', got {value!r}")
    return value


def parse_source(value: Any, where: str) -> str:
    """The hub (callers pass ``DEFAULT_SOURCE`` when the key is absent)."""
    if value not in SOURCES:
        raise ModelRefError(f"{where}.source must be one of {', '.join(SOURCES)}, got {value!r}")
    return str(value)


def parse_revision(value: Any, where: str, source: str, require: bool = False) -> str | None:
    """A commit id, branch or tag; None or '' is the hub's default branch, refused when
    ``require`` (model_weights_require_revision)."""
    if value is None or value == "":
        if require:
            raise ModelRefError(
                f"{where}.revision is not set and model_weights_require_revision is true: "
                f"pin the commit id to deploy (or set model_weights_require_revision: false "
                f"to follow {DEFAULT_REVISION[source]!r})"
            )
        return None
    revision = str(value)
    if not REVISION_RE.match(revision) or ".." in revision:
        raise ModelRefError(
            f"{where}.revision must be a commit id, branch or tag, got {revision!r}"
        )
    return revision


def parse_allow_patterns(value: Any, where: str) -> tuple[str, ...] | None:
    """None (every file), or a non-empty tuple of glob patterns; a string is one pattern."""
    if value is None:
        return None
    patterns = [value] if isinstance(value, str) else value
    if (
        not isinstance(patterns, list)
        or not patterns
        or not all(isinstance(p, str) and p for p in patterns)
    ):
        raise ModelRefError(
            f"{where}.allow_patterns must be a non-empty list of glob patterns such as "
            f"['*.safetensors', '*.json'], got {value!r}"
        )
    return tuple(patterns)


def model_dirname(model: str, revision: str | None) -> str:
    """``org/name@revision`` under the models root (``@main`` without a revision)."""
    return f"{model}@{revision or DIR_REVISION}"


def model_dir(root: str, model: str, revision: str | None) -> str:
    """The published model directory, ``<root>/<org>/<name>@<revision or main>``."""
    return f"{str(root).rstrip('/')}/{model_dirname(model, revision)}"


@dataclass(frozen=True)
class ModelRef:
    model: str
    source: str
    revision: str | None
    allow_patterns: tuple[str, ...] | None = None

    @property
    def repo_revision(self) -> str:
        """The revision asked of the hub: the pinned one, else the hub's default branch."""
        return self.revision or DEFAULT_REVISION[self.source]

    @property
    def dirname(self) -> str:
        """``org/name@revision`` under the models root (``model_dirname``)."""
        return model_dirname(self.model, self.revision)

    @property
    def pinned(self) -> bool:
        """The revision is a full commit id: its files can never change."""
        return bool(self.revision and COMMIT_RE.match(self.revision))


def parse_model_ref(raw: Mapping[str, Any], where: str, require_revision: bool = False) -> ModelRef:
    """The model keys of one service (other keys are ignored), checked, in the order a user
    fixes them: model, source, revision, allow_patterns."""
    model = parse_model(raw.get("model"), where)
    source = parse_source(raw.get("source", DEFAULT_SOURCE), where)
    return ModelRef(
        model=model,
        source=source,
        revision=parse_revision(raw.get("revision"), where, source, require_revision),
        allow_patterns=parse_allow_patterns(raw.get("allow_patterns"), where),
    )
