"""One home per rule, held: code asks a platform's class and a backend's class what they do,
and never compares their names (docs/design.md, "One home per rule")."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from acceldeploy.platforms import known_names
from acceldeploy.serving.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tools" / "acceldeploy"
PYTHON_TREES = (PACKAGE, ROOT / "plugins", ROOT / "roles")
ANSIBLE_TREES = (ROOT / "roles", ROOT / "playbooks")
# Where a name may be compared: the platforms' own package, the backends' own module, and the
# test harness (which builds hosts of each platform).
PLATFORM_HOME = PACKAGE / "platforms"
BACKEND_HOME = PACKAGE / "serving" / "backends.py"
LAB = PACKAGE / "lab"
# host_tuning_profiles is the user's table of tuning profiles keyed by platform name: looking
# the host's platform up in it is what the variable means, not a platform's behaviour.
ALLOWED = {("hosttuning/inputs.py", "platform not in profiles")}


def _operand_names(node: ast.expr) -> Iterator[str]:
    """What an operand of a comparison names: a string's value ("lit:..."), a variable's or
    attribute's name, a subscript's or .get()'s key."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield f"lit:{node.value}"
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _operand_names(element)
    elif isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        yield str(node.slice.value)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        yield str(node.args[0].value)


def _compared(path: Path, word: str, literals: set[str]) -> Iterator[ast.Compare]:
    """The comparisons in a Python file of a name in ``literals``, or of an operand whose name
    says ``word`` (`x is None` asks whether it is set, not what it is)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            continue
        names = [n for o in (node.left, *node.comparators) for n in _operand_names(o)]
        if any(n.startswith("lit:") and n[4:] in literals for n in names) or any(
            not n.startswith("lit:") and word in n.lower() for n in names
        ):
            yield node


def _python_comparisons(word: str, literals: set[str], home: Path) -> list[str]:
    found = []
    for tree in PYTHON_TREES:
        for path in sorted(tree.rglob("*.py")):
            if path.is_relative_to(home) or path.is_relative_to(LAB) or "__pycache__" in path.parts:
                continue
            where = str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else ""
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
                for node in _compared(path, word, literals)
                if (where, ast.unparse(node)) not in ALLOWED
            ]
    return found


WORDS = "|".join([*known_names(), *BACKENDS, "acceldeploy_platform", "backend"])
# A play's or template's comparison of a platform or a backend, either way round.
ANSIBLE_COMPARED = re.compile(
    rf"(==|!=|\bin\b)\s*\(?['\"]?({WORDS})\b|\b({WORDS})['\"]?\s*(==|!=|\bin\b)"
)


def _ansible_comparisons(path: Path) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0] if path.suffix == ".yml" else line
        if ANSIBLE_COMPARED.search(code):
            found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_platform_name_is_compared_outside_the_platforms_package() -> None:
    assert _python_comparisons("platform", set(known_names()), PLATFORM_HOME) == []


def test_no_backend_is_compared_outside_the_backends_module() -> None:
    assert _python_comparisons("backend", set(BACKENDS), BACKEND_HOME) == []


def test_no_play_task_or_template_compares_a_platform_or_a_backend() -> None:
    found = []
    for tree in ANSIBLE_TREES:
        for path in sorted([*tree.rglob("*.yml"), *tree.rglob("*.j2")]):
            found += _ansible_comparisons(path)
    assert found == []


def test_the_scans_see_a_comparison_and_let_a_question_pass(tmp_path: Path) -> None:
    code = tmp_path / "code.py"
    code.write_text(
        'if host["platform"] == "cpu":\n    pass\n'
        'if service.backend in ("ray", "mp"):\n    pass\n'
        "if host.platform is None or for_name(name).has_devices:\n    pass\n"
    )
    assert [n.lineno for n in _compared(code, "platform", set(known_names()))] == [1]
    assert [n.lineno for n in _compared(code, "backend", set(BACKENDS))] == [3]
    assert ANSIBLE_COMPARED.search("when: acceldeploy_platform == 'ascend'")
    assert ANSIBLE_COMPARED.search("when: \"'gaudi' in group_names\"")
    assert not ANSIBLE_COMPARED.search("when: acceldeploy_runtime | length > 0")
