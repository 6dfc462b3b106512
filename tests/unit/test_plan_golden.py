"""What the planner prints for every host of every example and lab inventory, and the stacks
table, held byte for byte against tests/data/golden/: a move of code that changes no behaviour
changes none of them. A change that means to change one rewrites the record with
`ACCELDEPLOY_GOLDEN_UPDATE=1 pytest tests/unit/test_plan_golden.py` and shows the difference in
its commit. The lab inventories' hosts.yml (inventory/lab/hosts.yml, which the others link to)
is the one `tools/lab.py up --hosts 2` writes, not in git: written here with the lab's writer."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from acceldeploy.cli import main
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy_lab.inventory import InventoryHost, write_inventory

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/data/golden"
INVENTORIES = sorted(
    [p.relative_to(ROOT) for p in (ROOT / "inventory/examples").iterdir() if p.is_dir()]
    + [p.relative_to(ROOT) for p in (ROOT / "inventory").glob("lab*") if p.is_dir()]
)
LABS = Path(tempfile.mkdtemp(prefix="golden-lab-"))
for lab in (ROOT / "inventory").glob("lab*"):
    shutil.copytree(lab, LABS / lab.name, ignore=shutil.ignore_patterns("hosts.yml"))
    write_inventory(LABS / lab.name / "hosts.yml",
                    [InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202)],
                    Path("/run/acceldeploy-lab/id_ed25519"))  # fmt: skip


def _path(inventory: Path | str) -> str:
    """Where an inventory of the record is read from: the lab's with the hosts.yml above."""
    name = Path(inventory)
    return str(LABS / name.name if name.parent == Path("inventory") else ROOT / name)


HOSTS = [(str(inv), host) for inv in INVENTORIES for host in sorted(hosts_vars(_path(inv)))]


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def _held(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ACCELDEPLOY_GOLDEN_UPDATE") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is not recorded: ACCELDEPLOY_GOLDEN_UPDATE=1 records it"
    assert text == path.read_text(), f"{name} differs from its record"


@pytest.mark.parametrize("inventory", [str(i) for i in INVENTORIES])
def test_render_json_is_unchanged(inventory: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _printed(capsys, ["plan", "render", "-i", _path(inventory), "--json"])
    _held(f"{inventory.replace('/', '_')}.json", text)


@pytest.mark.parametrize(("inventory", "host"), HOSTS)
def test_render_unit_is_unchanged(
    inventory: str, host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "render", "-i", _path(inventory), "--host", host, "--unit"]
    _held(f"{inventory.replace('/', '_')}.{host}.unit", _printed(capsys, argv))


def test_stacks_are_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    _held("stacks.txt", _printed(capsys, ["plan", "stacks"]))
