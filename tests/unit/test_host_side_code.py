"""One guard for everything that runs on a host, on the oldest Python a host may have (3.9,
docs/reference/targets.md): the modules, the package code Ansible ships with them as
module_utils (found from their imports, so a new one is held too), and the helpers the roles
copy (roles/*/files, unitmemory.py among them). Each keeps 3.9's syntax and library, and
imports at module level only the standard library, Ansible's module_utils (a module) or its
own package (relative); the hub clients only inside the functions that use them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tools" / "acceldeploy"
MODULE_UTILS = "ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy"
OLDEST = (3, 9)
# Imported inside the functions that use them: the hub clients (the fetch venv has them), Ray
# and vLLM (ray-wait and the bench driver run with the serving environment's Python).
LAZY_OK = ("huggingface_hub", "modelscope", "modelscope_hub", "ray", "vllm")
# The library features newer than 3.9 that its syntax check cannot see.
NEWER_CALLS = {"zip": {"strict"}, "dataclass": {"slots", "kw_only"},
               "dataclasses.dataclass": {"slots", "kw_only"}}  # fmt: skip
NEWER_NAMES = {"datetime.UTC", "typing.Self", "typing.TypeAlias", "enum.StrEnum"}


def _package_file(dotted: str) -> Path:
    path = PACKAGE.joinpath(*dotted.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _imported(path: Path, tree: ast.Module) -> list[Path]:
    """The package files `path` imports: through module_utils (a module) or relatively."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith(MODULE_UTILS)
        ):
            base = node.module[len(MODULE_UTILS) :].lstrip(".")
            for alias in node.names:
                candidates = [f"{base}.{alias.name}".lstrip("."), base]
                found += [_package_file(c) for c in candidates if c and _package_file(c).is_file()][
                    :1
                ]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            anchor = path.parent
            for _ in range(node.level - 1):
                anchor = anchor.parent
            target = anchor.joinpath(*(node.module or "").split(".")) if node.module else anchor
            for alias in node.names:
                for candidate in (target / alias.name, target):
                    file = (
                        candidate / "__init__.py"
                        if candidate.is_dir()
                        else candidate.with_suffix(".py")
                    )
                    if file.is_file():
                        found.append(file)
                        break
    return found


def _is_python(path: Path) -> bool:
    if not path.is_file():
        return False
    first = path.read_text().split("\n", 1)[0]
    return path.suffix == ".py" or (first.startswith("#!") and "python" in first)


def _annotations(tree: ast.Module) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                         node.args.vararg, node.args.kwarg]  # fmt: skip
            found += [a.annotation for a in arguments if a is not None and a.annotation]
            found += [node.returns] if node.returns else []
    return found


# Run from the package where the models are: a host that mounts the shared model storage.
RUN_FROM_THE_PACKAGE = (PACKAGE / "host" / "fetch" / "__main__.py",)
# The home of host-side code; the modules stay where Ansible looks for them.
HOME = PACKAGE / "host"
# What the host-side code imports from the package's root (shipped with it): the package's own
# __init__, its errors (which mask secrets) and its model references.
SHARED_WITH_THE_CONTROLLER = ("__init__.py", "errors.py", "secrets.py", "modelref.py")


def host_side_files() -> list[Path]:
    """Every file that runs on a host: the modules and what they import (Ansible ships a
    package module with its package's __init__), the package's entry points run there, and the
    helpers the roles copy (each alone)."""
    shipped = [*sorted((ROOT / "plugins" / "modules").glob("*.py")), *RUN_FROM_THE_PACKAGE]
    seen: dict[Path, None] = {}
    while shipped:
        path = shipped.pop().resolve()
        if path in seen:
            continue
        seen[path] = None
        shipped += _imported(path, ast.parse(path.read_text()))
        init = path.parent / "__init__.py"
        while path.is_relative_to(PACKAGE) and init.is_relative_to(PACKAGE) and init.is_file():
            shipped.append(init)
            init = init.parent.parent / "__init__.py"
    copied = [p.resolve() for p in sorted(ROOT.glob("roles/*/files/*")) if _is_python(p)]
    home = [p.resolve() for p in sorted(HOME.rglob("*"))
            if not any(part.startswith((".", "__pycache__")) for part in p.relative_to(HOME).parts)
            and _is_python(p)]  # fmt: skip
    return sorted({*seen, *copied, *home})


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_guard_sees_every_kind_of_host_side_code() -> None:
    found = {_where(p) for p in host_side_files()}
    for expected in ("plugins/modules/acceldeploy_group_gate.py", "tools/acceldeploy/host/readiness/gate.py",
                     "tools/acceldeploy/host/fetch/seed.py", "tools/acceldeploy/host/state/drift.py",
                     "tools/acceldeploy/host/unitmemory.py", "tools/acceldeploy/host/helpers/vllm-dp-watch",
                     "tools/acceldeploy/host/helpers/haproxy-save-state", "tools/acceldeploy/__init__.py",
                     "tools/acceldeploy/host/bench/driver.py"):  # fmt: skip
        assert expected in found, expected
    assert "tools/acceldeploy/roles/contract.py" not in found


def problems(path: Path, is_module: bool = False, beside: tuple[str, ...] = ()) -> list[str]:
    """What in a host-side file would not run on the oldest Python a host may have; `beside`:
    the modules installed beside a role's helper (its siblings in roles/<role>/files)."""
    source = path.read_text()
    try:
        tree = ast.parse(source, feature_version=OLDEST)
    except SyntaxError as exc:
        return [f"3.9 cannot parse it: {exc.msg} (line {exc.lineno})"]
    found = []
    ansible = ("ansible", "ansible_collections") if is_module else ()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and not (
            isinstance(node, ast.ImportFrom) and node.level > 0
        ):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            lazy = () if node in tree.body else LAZY_OK
            for name in names:
                top = str(name).split(".")[0]
                if not (top in sys.stdlib_module_names or top in (*ansible, *lazy, *beside)):
                    found.append(f"imports {name}" + (" at module level" if not lazy else ""))
        if isinstance(node, ast.Call):
            newer = NEWER_CALLS.get(ast.unparse(node.func), set()) & {k.arg for k in node.keywords}
            if newer:
                found.append(f"{ast.unparse(node.func)}({', '.join(sorted(newer))}=) is 3.10+")
        if isinstance(node, ast.Attribute) and ast.unparse(node) in NEWER_NAMES:
            found.append(f"{ast.unparse(node)} is 3.11+")
    unions = [a for a in _annotations(tree) for n in ast.walk(a)
              if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr)]  # fmt: skip
    # `X | None` is evaluated at def time on 3.9 unless annotations stay strings
    if unions and "from __future__ import annotations" not in source:
        found.append("an `X | Y` annotation without `from __future__ import annotations`")
    return found


def _siblings(path: Path) -> tuple[str, ...]:
    """The modules installed beside this file: a role's helper's siblings in roles/<role>/files,
    or the files acceldeploy bench ships beside its driver (none for other host-side code)."""
    from acceldeploy.bench.runner import MODULES

    shipped = {Path(str(m.__file__)).resolve() for m in MODULES}
    if path in shipped:
        return tuple(p.stem for p in shipped if p != path)
    helpers = [p for p in ROOT.glob("roles/*/files/*") if p.resolve() == path]
    return tuple(p.stem for h in helpers for p in h.parent.glob("*.py") if p != h)


def test_host_side_code_has_one_home() -> None:
    """What runs on a host lives in tools/acceldeploy/host/ (the roles' helpers are symlinks
    into it); only the modules, where Ansible looks for them, and the package's root modules
    the host code imports are elsewhere."""
    elsewhere = [
        _where(p) for p in host_side_files()
        if not p.is_relative_to(HOME) and p.parent != ROOT / "plugins" / "modules"
        and not (p.parent == PACKAGE and p.name in SHARED_WITH_THE_CONTROLLER)
    ]  # fmt: skip
    assert elsewhere == []
    for helper in ROOT.glob("roles/*/files/*"):
        assert helper.is_symlink() and helper.resolve().is_relative_to(HOME), _where(helper)


@pytest.mark.parametrize("path", host_side_files(), ids=_where)
def test_host_side_code_runs_on_the_oldest_python_a_host_may_have(path: Path) -> None:
    assert problems(path, path.parent == ROOT / "plugins" / "modules", _siblings(path)) == []


def test_the_guard_names_what_a_host_s_python_cannot_run(tmp_path: Path) -> None:
    code = tmp_path / "helper"
    code.write_text(
        "import yaml\nimport datetime\n\n\ndef f(x: int | None) -> None:\n"
        "    import ray\n    import requests\n    zip([], [], strict=True)\n"
        "    return datetime.UTC\n"
    )
    assert problems(code) == [
        "imports yaml at module level", "imports requests", "zip(strict=) is 3.10+",
        "datetime.UTC is 3.11+",
        "an `X | Y` annotation without `from __future__ import annotations`",
    ]  # fmt: skip
    code.write_text("match x:\n    case 1:\n        pass\n")
    assert problems(code)[0].startswith("3.9 cannot parse it")
