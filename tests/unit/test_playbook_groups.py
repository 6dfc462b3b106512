"""The groups every play names (playbooks/groups.yml, tools/acceldeploy/inventory/groups.py),
and the first play of every entry playbook, which the controller's main process templates."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from acceldeploy.inventory import groups

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = [ROOT / "site.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]


def plays(playbook: Path) -> list[dict]:
    """The plays a playbook runs, its imports expanded in order."""
    found: list[dict] = []
    for entry in yaml.safe_load(playbook.read_text()) or []:
        imported = entry.get("ansible.builtin.import_playbook")
        if imported:
            found += plays(playbook.parent / imported)
        else:
            found.append(entry)
    return found


def test_the_serving_pattern_is_all_but_the_gateways_and_monitors() -> None:
    inventory = {"all": ["a", "gw", "b", "mon"], "gateways": ["gw"], "monitors": ["mon"]}
    assert groups.serving_pattern(inventory) == "all:!gateways:!monitors"
    assert groups.serving_pattern({"all": ["a"]}) == "all"


def test_a_gateway_or_monitor_that_serves_as_well_stays_in_the_pattern() -> None:
    inventory = {"all": ["a", "gw", "b", "mon"], "gateways": ["gw"], "monitors": ["mon"]}
    assert groups.serving_pattern(inventory, ["gw"]) == "all:!monitors"
    assert groups.serving_pattern(inventory, ["gw", "mon"]) == "all"


def test_only_a_gateway_or_monitor_that_sets_acceldeploy_serves_serves() -> None:
    assert groups.serves({"group_names": ["fleet"]})
    assert not groups.serves({"group_names": ["fleet", "gateways"]})
    assert groups.serves({"group_names": ["gateways"], "acceldeploy_serves": True})
    assert groups.serves({"group_names": ["monitors"], "acceldeploy_serves": True})
    assert not groups.serves({"group_names": ["monitors"], "acceldeploy_serves": "yes"})


def test_every_entry_playbook_computes_the_groups_in_its_first_play() -> None:
    # The first play's hosts name acceldeploy's own filter: templated in the controller's main
    # process, it loads the collection's filter plugins there, before the first task forks a
    # worker per host. A worker that must import them itself costs ~0.2 s a task and host.
    for entry in ENTRIES:
        if entry.name == "groups.yml" or entry.parent.name == "tasks":
            continue
        first = plays(entry)[0]
        assert re.search(
            r"\| acceldeploy\.fleet\.acceldeploy_(serving|run)_pattern", first["hosts"]
        ), entry.name
        tasks = first.get("tasks", [])
        assert any(t.get("ansible.builtin.import_tasks") == "tasks/serving_group.yml"
                   for t in tasks), entry.name  # fmt: skip


def test_every_play_names_a_group_not_an_expression_of_its_own() -> None:
    for entry in ENTRIES:
        for play in plays(entry):
            hosts = " ".join(str(play["hosts"]).split())
            assert "intersect" not in hosts and "regex_replace" not in hosts, (entry.name, hosts)
