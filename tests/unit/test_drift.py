"""tools/acceldeploy/host/state/drift.py: the no-op path's record and comparison, on real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from acceldeploy.host.state import drift


def converge(tmp_path: Path, key: str = "k1") -> tuple[Path, drift.Spec]:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/a.conf").write_text("a=1\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model/w.bin").write_bytes(b"x" * 100)
    os.symlink("venv-abc", tmp_path / "venv")
    spec = drift.Spec.of(
        {
            "files": [str(tmp_path / "etc/*.conf"), str(tmp_path / "venv")],
            "trees": [str(tmp_path / "model")],
        }
    )
    path = tmp_path / "state/role.json"
    content = drift.record(key, spec, drift.observe(spec), {"summary": "tuned"})
    assert drift.write_record(str(path), content)
    return path, spec


def test_nothing_changed_is_no_drift_and_the_record_is_private(tmp_path: Path) -> None:
    path, _ = converge(tmp_path)
    recorded = drift.read_record(str(path))
    assert drift.drift(recorded, "k1") == []
    assert recorded and recorded["data"] == {"summary": "tuned"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_rewriting_the_same_record_writes_nothing(tmp_path: Path) -> None:
    path, spec = converge(tmp_path)
    content = drift.record("k1", spec, drift.observe(spec), {"summary": "tuned"})
    assert drift.write_record(str(path), content) is False


def test_each_kind_of_change_is_drift_naming_what(tmp_path: Path) -> None:
    path, _ = converge(tmp_path)
    recorded = drift.read_record(str(path))
    assert drift.drift(None, "k1") == ["no record of a converged run"]
    assert drift.drift(recorded, "k2") == [
        "the inputs or acceldeploy changed since the last converge"
    ]
    (tmp_path / "etc/a.conf").write_text("a=2\n")
    (tmp_path / "etc/b.conf").write_text("b=1\n")
    os.remove(tmp_path / "venv")
    os.symlink("venv-def", tmp_path / "venv")
    os.utime(tmp_path / "model/w.bin", ns=(1, 1))
    assert drift.drift(recorded, "k1") == [
        f"{tmp_path}/etc/a.conf changed",
        f"{tmp_path}/etc/b.conf appeared",
        f"{tmp_path}/venv changed",
        f"{tmp_path}/model: w.bin changed",
    ]
    (tmp_path / "model/w.bin").unlink()
    (tmp_path / "model").rmdir()
    assert f"{tmp_path}/model is gone" in drift.drift(recorded, "k1")


def test_units_are_compared_by_state(tmp_path: Path) -> None:
    recorded = drift.record(
        "k",
        drift.Spec.of({"units": ["acceldeploy-no-such.service"]}),
        drift.Observation(units={"acceldeploy-no-such.service": {"ActiveState": "active"}}),
        {},
    )
    (reason,) = drift.drift(recorded, "k")
    assert reason.startswith("unit acceldeploy-no-such.service is ")
    assert reason.endswith("(was active/None)")


def test_the_key_follows_inputs_and_code(tmp_path: Path) -> None:
    assert drift.state_key({"a": 1, "b": 2}, "c") == drift.state_key({"b": 2, "a": 1}, "c")
    assert drift.state_key({"a": 1}, "c") != drift.state_key({"a": 2}, "c")
    assert drift.state_key({"a": 1}, "c") != drift.state_key({"a": 1}, "d")
    (tmp_path / "roles/r/tasks").mkdir(parents=True)
    (tmp_path / "roles/r/tasks/main.yml").write_text("---\n")
    (tmp_path / "lab/acceldeploy_lab").mkdir(parents=True)  # the lab's own distribution
    before = drift.code_digest(str(tmp_path))
    (tmp_path / "lab/acceldeploy_lab/x.py").write_text("pass\n")
    assert drift.code_digest(str(tmp_path)) == before
    (tmp_path / "roles/r/tasks/main.yml").write_text("---\n# changed\n")
    assert drift.code_digest(str(tmp_path)) != before


def test_the_key_follows_the_installed_package_apart_from_the_collection(tmp_path: Path) -> None:
    """A wheel upgraded without the collection (or the other way round) changes the key."""
    collection, package = tmp_path / "collection", tmp_path / "site-packages" / "acceldeploy"
    (collection / "roles/r/tasks").mkdir(parents=True)
    (collection / "roles/r/tasks/main.yml").write_text("---\n")
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.1.0"\n')
    before = drift.code_digest(str(collection), str(package))
    assert before != drift.code_digest(str(collection))
    (package / "__pycache__" / "x.pyc").write_text("pass\n")
    assert drift.code_digest(str(collection), str(package)) == before
    (package / "__init__.py").write_text('__version__ = "0.1.1"\n')
    assert drift.code_digest(str(collection), str(package)) != before


def test_host_tuning_watches_what_it_writes_and_what_it_sets_live() -> None:
    from acceldeploy import hosttuning

    plan = {
        "probe": {
            "files": ["/etc/default/grub.d/acceldeploy.cfg", "/etc/default/grub"],
            "sysctls": ["kernel.numa_balancing", "vm.nr_hugepages"],
            "units": ["ondemand.service"],
        },
        "kernel": {
            "grub": {
                "path": "/etc/default/grub.d/acceldeploy.cfg",
                "cfg_path": "/boot/grub/grub.cfg",
            }
        },
        "sysctls": {"file": "/etc/sysctl.d/90-acceldeploy.conf"},
        "hugepages": {"file": "/etc/sysctl.d/91-acceldeploy-hugepages.conf"},
    }
    spec = hosttuning.state_spec(plan)
    assert spec["units"] == ["ondemand.service"]
    assert set(spec["files"]) == {
        "/boot/grub/grub.cfg",
        "/etc/default/grub",
        "/etc/default/grub.d/acceldeploy.cfg",
        "/etc/sysctl.d/90-acceldeploy.conf",
        "/etc/sysctl.d/91-acceldeploy-hugepages.conf",
        "/proc/cmdline",
        "/proc/sys/kernel/numa_balancing",
        "/proc/sys/vm/nr_hugepages",
        hosttuning.planning.GOVERNOR_FILES,
    }


def test_the_recorded_outcome_is_a_rerun_s_and_a_done_reboot_waits_no_more() -> None:
    from acceldeploy import hosttuning

    outcome = {
        "check_mode": False,
        "sysctls": {"changed": True},
        "bios_audit": {"warnings": []},
        "reboot_reasons": ["kernel arguments changed"],
    }
    steady = hosttuning.steady_outcome(outcome, {})
    assert steady == {
        "check_mode": False,
        "bios_audit": {"warnings": []},
        "reboot_reasons": ["kernel arguments changed"],
    }
    assert hosttuning.steady_outcome(outcome, {"rebooted": True})["reboot_reasons"] == []


def test_model_weights_watches_each_published_directory_and_the_fetch_venv() -> None:
    from acceldeploy.downloads import weights

    job = {
        "hub": [{"model": "org/a", "revision": "c1"}],
        "pull": [{"model": "org/b", "revision": None}],
        "verify": [],
    }
    assert weights.state_spec(job, "/models/", "/opt/v") == {
        "trees": ["/models/org/a@c1", "/models/org/b@main"],
        "files": ["/opt/v/acceldeploy-requirements.txt", "/opt/v/bin/python"],
    }


def test_one_host_with_drift_sends_the_whole_play_down_the_full_path() -> None:
    from acceldeploy.downloads import weights

    quiet, idle = {"drift": []}, {"skipped": True}
    assert weights.any_drift([quiet, idle]) is False
    assert weights.any_drift([quiet, {"drift": ["/models/org/a@c1 is gone"]}]) is True
    assert weights.any_drift([quiet, {"changed": False}]) is True  # no answer: check in full


def test_the_recorded_model_summary_reads_as_a_rerun() -> None:
    from acceldeploy.downloads import weights

    plans = [
        {"dir": "org/a@c1", "action": "download", "reason": "missing", "needed_bytes": 2097152}
    ]
    assert weights.summary_lines(plans) == ["org/a@c1: download (missing); 2.0 MiB to fetch"]
    assert weights.summary_lines(plans, steady=True) == [
        "org/a@c1: none (unchanged since the last converge)"
    ]


def test_only_a_whole_real_run_records() -> None:
    assert drift.whole_run(["all"], [], False)
    assert not drift.whole_run(["all"], [], True)
    assert not drift.whole_run(["serve"], [], False)
    assert not drift.whole_run(["all"], ["verify"], False)


def test_a_play_runs_as_ansible_selects_it_by_tags() -> None:
    assert drift.play_runs(["verify"], ["all"], [])
    assert drift.play_runs(["verify"], ["verify", "serve"], [])
    assert not drift.play_runs(["verify"], ["serve"], [])
    assert not drift.play_runs(["verify"], ["all"], ["verify"])
    assert not drift.play_runs(["verify"], ["all"], ["all"])
    assert drift.play_runs(["verify"], ["all"], ["monitor"])
