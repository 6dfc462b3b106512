"""The one command, `acceldeploy`: its subcommands (the lab's from its own distribution, through
an entry point), --version, the shared options declared once, the tools/*.py shims and the one
error style (one line, `acceldeploy <sub>: error: ...`, exit 2)."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acceldeploy import __version__, cli
from acceldeploy.cli import common

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tools" / "acceldeploy"
SHIMS = {"plan": "plan.py", "verify": "verify.py", "bench": "bench.py", "tune": "tune.py",
         "lab": "lab.py"}  # fmt: skip
SCRIPT = Path(sys.executable).with_name("acceldeploy")  # the console script pip installs


def acceldeploy(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "acceldeploy"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, check=False, cwd=ROOT, timeout=120
    )


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    assert parser._subparsers is not None
    action = parser._subparsers._group_actions[0]
    assert isinstance(action, argparse._SubParsersAction)
    return dict(action.choices)


def test_help_lists_every_subcommand():
    proc = acceldeploy("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: acceldeploy")
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("    ")]
    for name in cli.commands():
        assert name in listed, proc.stdout
    assert set(cli.commands()) >= set(SHIMS)


def test_console_script_is_declared():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'acceldeploy = "acceldeploy.cli:main"' in pyproject


def test_version_prints_the_package_version_and_every_pinned_stack():
    proc = acceldeploy("--version")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"acceldeploy {__version__}"
    assert importlib.metadata.version("acceldeploy") == __version__  # pyproject reads it
    stacks = yaml.safe_load((ROOT / "versions" / "stacks.yml").read_text())["stacks"]
    for name, entry in stacks.items():
        line = next((x for x in lines[1:] if x.split()[0] == name), None)
        assert line is not None, f"{name} missing from\n{proc.stdout}"
        assert (line.split()[1] == "(default)") == bool(entry.get("default"))
        assert f"vLLM {entry['vllm']}" in line
        for plugin in ("vllm_ascend", "vllm_fork_ref"):
            if plugin in entry:
                assert str(entry[plugin]) in line


def test_inventory_is_declared_once_in_the_product():
    declared = [
        path.relative_to(PACKAGE)
        for path in PACKAGE.rglob("*.py")
        if '"--inventory"' in path.read_text()
    ]
    assert declared == [Path("cli/common.py")]


def test_subcommands_share_the_parent_options():
    """-i, --limit and --json are the parent parsers' own actions wherever they appear."""
    shared = common.parents()
    top = cli.build_parser()
    commands = subparsers(top)
    takers = {
        "verify": commands["verify"],
        "bench": commands["bench"],
        "tune": commands["tune"],
        "plan render": subparsers(commands["plan"])["render"],
    }
    for name, parser in takers.items():
        action = parser._option_string_actions["-i"]
        assert action.option_strings == ["-i", "--inventory"] and action.required, name
    # one Parents object is handed to every subcommand: their -i is one action
    ids = {id(parser._option_string_actions["--inventory"]) for parser in takers.values()}
    assert len(ids) == 1
    assert "--limit" in commands["verify"]._option_string_actions
    assert "--limit" not in commands["tune"]._option_string_actions
    assert "--json" not in commands["bench"]._option_string_actions
    assert shared.inventory._option_string_actions["-i"].required


def test_product_commands_do_not_import_the_lab():
    """The product's subcommands import nothing of the lab; the lab's wiring module (its entry
    point) imports the lab's commands only when its parser is built."""
    code = (
        "import sys\n"
        "import acceldeploy.cli as c\n"
        "for name in c.COMMANDS: c.subcommand(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('acceldeploy_lab')))\n"
        "c.subcommand('lab')\n"
        "print(sorted(m for m in sys.modules if m.startswith('acceldeploy_lab')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert proc.stdout.splitlines() == ["[]", "['acceldeploy_lab', 'acceldeploy_lab.command']"]


def test_the_lab_command_comes_from_the_lab_distribution():
    """`lab` is no module of acceldeploy.cli: acceldeploy-lab (lab/pyproject.toml) names it in
    the acceldeploy.commands entry-point group, and the command lists it after its own."""
    assert "lab" not in cli.COMMANDS and not (PACKAGE / "cli" / "lab.py").exists()
    (entry,) = importlib.metadata.entry_points(group=cli.ENTRY_POINTS, name="lab")
    assert entry.value == "acceldeploy_lab.command"
    assert entry.dist is not None and entry.dist.name == "acceldeploy-lab"
    assert cli.commands() == (*cli.COMMANDS, "lab")
    assert cli.subcommand("lab").__name__ == "acceldeploy_lab.command"
    assert "lab" in subparsers(cli.build_parser())


def test_without_the_lab_installed_lab_is_an_unknown_command(monkeypatch, capsys):
    """acceldeploy alone (no acceldeploy-lab: no entry point of the group): argparse's own
    error for an unknown command, and no lab in the help."""
    real = importlib.metadata.entry_points

    def without_the_lab(**params):
        if params.get("group") == cli.ENTRY_POINTS:
            return importlib.metadata.EntryPoints(())
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", without_the_lab)
    assert cli.commands() == cli.COMMANDS
    assert "lab" not in subparsers(cli.build_parser())
    with pytest.raises(SystemExit) as exit_:
        cli.main(["lab", "--help"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("acceldeploy: error: argument COMMAND: invalid choice: 'lab'"), err
    assert err.count("\n") == 1


def test_plan_shim_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "plan.py"), "catalog"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Qwen/" in proc.stdout


@pytest.mark.parametrize("name", sorted(SHIMS))
def test_each_shim_is_its_subcommand_under_its_own_name(name):
    shim = SHIMS[name]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / shim), "--help"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {shim} ")
    direct = acceldeploy(name, "--help")
    assert direct.returncode == 0
    assert direct.stdout.startswith(f"usage: acceldeploy {name} ")


@pytest.mark.parametrize(
    ("args", "prefix", "named"),
    [
        (["verify"], "acceldeploy verify: error: ", "-i/--inventory"),
        (["bench", "-i", "x", "--profile", "smoke", "--timeout", "0"],
         "acceldeploy bench: error: ", "--timeout"),
        (["plan", "kv", "--model", "Qwen/Qwen3-8B", "--tp", "0"], "acceldeploy plan kv: error: ",
         "--tp"),
        (["nope"], "acceldeploy: error: ", "invalid choice"),
        # an AcceldeployError, not a usage error: the same style
        (["plan", "kv", "--model", "Qwen/Qwen3-8B", "--available-gib", "4"],
         "acceldeploy plan kv: error: ", "--platform"),
        (["verify", "-i", "inventory/examples/ascend-910b", "--json", "--junit", "x.xml"],
         "acceldeploy verify: error: ", "--junit"),
    ],
)  # fmt: skip
def test_an_error_is_one_line_exit_2(args, prefix, named):
    proc = acceldeploy(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix) and named in lines[0], proc.stderr
    assert proc.stdout == ""


def test_an_error_masks_credentials(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["plan", "catalog", "--api-key", "sk-planted0123456789"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("acceldeploy plan catalog: error: ") and err.count("\n") == 1
    assert "sk-planted0123456789" not in err


def test_an_acceldeploy_error_names_the_shim(capsys):
    code = cli.main(["plan", "kv", "--model", "Qwen/Qwen3-8B", "--available-gib", "4"],
                    prog="plan.py")  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("plan.py kv: error: give --platform") and err.count("\n") == 1


def test_the_files_the_commands_read_exist() -> None:
    """Paths the CLI modules build from their own location (they moved into cli/ once and a
    schema path broke only on the lab)."""
    from acceldeploy.cli import bench

    assert bench.SCHEMA.is_file(), bench.SCHEMA


def test_the_lab_shim_without_the_lab_says_what_is_missing():
    code = (
        "import importlib.metadata as m, runpy, sys\n"
        "real = m.entry_points\n"
        "m.entry_points = lambda **k: (m.EntryPoints(()) if k.get('group') == "
        f"{cli.ENTRY_POINTS!r} else real(**k))\n"
        "sys.argv = ['lab.py', '--help']\n"
        f"runpy.run_path({str(ROOT / 'tools' / 'lab.py')!r}, run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "lab.py: error: acceldeploy-lab is not installed: pip install -e ./lab\n"


def test_an_installed_command_that_does_not_load_leaves_the_others_working(monkeypatch, capsys):
    """Another distribution's entry point whose module is gone (half uninstalled): a warning
    naming it, and every built-in command still runs."""
    broken = importlib.metadata.EntryPoint("lab", "acceldeploy_no_such_module", cli.ENTRY_POINTS)
    real = importlib.metadata.entry_points

    def with_a_broken_one(**params):
        if params.get("group") == cli.ENTRY_POINTS:
            return importlib.metadata.EntryPoints((broken,))
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", with_a_broken_one)
    assert "lab" not in subparsers(cli.build_parser())
    assert "the installed command 'lab' does not load" in capsys.readouterr().err
    assert cli.main(["plan", "catalog"]) == 0
