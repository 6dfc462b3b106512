"""`acceldeploy init` (acceldeploy.siteinit): the real probe script run by this machine's sh (in
place of SSH to a host), with fake `npu-smi` / `hl-smi` on PATH printing recorded real output;
the planner's own sizing; the written inventory read back by `plan render`; and each refusal,
with nothing written. On real hosts over SSH: tests/lab/test_site_init_lab.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

from acceldeploy.cli import main
from acceldeploy.errors import AcceldeployError
from acceldeploy.siteinit import draft, probe

RECORDED = Path(__file__).resolve().parents[1] / "data/recorded"
Runner = Callable[[Sequence[str], str], tuple[int, str, str]]


def local(tools: Path | None = None) -> Runner:
    """The probe run by this machine's sh, with `tools` first on PATH."""

    def run(argv: Sequence[str], stdin: str) -> tuple[int, str, str]:
        assert argv[0] == "ssh" and argv[-1] == "sh -s"
        path = f"{tools}:{os.environ['PATH']}" if tools else os.environ["PATH"]
        done = subprocess.run(["sh", "-s"], input=stdin, capture_output=True, text=True,
                              env={**os.environ, "PATH": path})  # fmt: skip
        return done.returncode, done.stdout, done.stderr

    return run


def fake_tool(directory: Path, name: str, recording: str, rc: int = 0) -> Path:
    directory.mkdir(exist_ok=True)
    tool = directory / name
    tool.write_text(f"#!/bin/sh\ncat {RECORDED / recording}\nexit {rc}\n")
    tool.chmod(0o755)
    return directory


def report(tmp: Path, name: str = "", recording: str = "", rc: int = 0) -> probe.HostReport:
    tools = fake_tool(tmp / "bin", name, recording, rc) if name else None
    target = probe.Target.parse("npu-01=127.0.0.1:2299")
    return probe.probe(target, "ops", runner=local(tools))


def test_targets_read_name_address_and_port() -> None:
    assert probe.Target.parse("lab1=127.0.0.1:2201") == probe.Target("lab1", "127.0.0.1", 2201)
    assert probe.Target.parse("10.0.0.5") == probe.Target("10.0.0.5", "10.0.0.5", 22)
    with pytest.raises(AcceldeployError, match="is not a TCP port"):
        probe.Target.parse("h=10.0.0.5:99999")


def test_a_host_without_device_tools_is_a_cpu_host(tmp_path: Path) -> None:
    found = report(tmp_path)
    assert found.platform == "cpu" and found.devices == ()
    assert found.facts is not None and found.facts.systemd and found.facts.pythons["python3"]
    assert found.os == f"{found.facts.os_id}-{found.facts.version_id}".lower()


def test_npu_smi_makes_it_ascend_with_its_devices_and_memory(tmp_path: Path) -> None:
    found = report(tmp_path, "npu-smi", "npu-smi-info-910b1-x8.txt")
    assert (found.platform, found.devices, found.device_mib) == ("ascend", tuple(range(8)), 65536)
    assert "ascend: 8 x 910B1 (64 GiB each)" in found.summary()


def test_hl_smi_makes_it_gaudi(tmp_path: Path) -> None:
    found = report(tmp_path, "hl-smi", "hl-smi-gaudi2-hl225-x8.txt")
    assert found.platform == "gaudi" and len(found.devices) == 8
    assert found.device_mib and found.device_mib > 90_000


def test_a_failing_device_tool_is_refused_with_its_output(tmp_path: Path) -> None:
    found = report(tmp_path, "npu-smi", "hccn-tool-link-g-format.txt", rc=8)
    (error,) = found.errors
    assert error.startswith("npu-01: npu-smi info failed (rc 8)")
    assert "the driver is not ready" in error


def test_an_unreachable_host_is_refused_naming_what_to_check() -> None:
    def refused(argv: Sequence[str], stdin: str) -> tuple[int, str, str]:
        return 255, "", "ssh: connect to host 127.0.0.1 port 2299: Connection refused\n"

    found = probe.probe(probe.Target.parse("npu-01=127.0.0.1:2299"), "ops", runner=refused)
    assert found.errors == (
        "npu-01: unreachable over SSH as ops@127.0.0.1:2299: ssh: connect to host 127.0.0.1 "
        "port 2299: Connection refused; check the address, port, user and key",
    )


def test_an_unsupported_release_is_refused(tmp_path: Path) -> None:
    _, stdout, _ = local()(["ssh", "sh -s"], probe.script())
    _, _, rest = stdout.partition("== systemd")
    focal = '== os-release\nID=ubuntu\nVERSION_ID="20.04"\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n'
    found = probe.read(probe.Target.parse("old=127.0.0.1"), focal + "== systemd" + rest)
    assert any("Ubuntu 20.04.6 LTS (ID=ubuntu VERSION_ID=20.04) is refused" in e
               for e in found.errors), found.errors  # fmt: skip


def spec(model: str) -> dict[str, object]:
    return draft.first_spec(model, draft.service_name(model), "modelscope", "", {})


def test_the_planner_sizes_the_first_service_from_the_catalogs_size_up(tmp_path: Path) -> None:
    found = report(tmp_path, "npu-smi", "npu-smi-info-910b1-x8.txt")
    sized = draft.size_service([found], "ascend", spec("Qwen/Qwen3-VL-32B-Instruct"), "/models",
                               {"npu-01": {}})  # fmt: skip
    assert sized.service["devices"] == [0, 1] and sized.service["tensor_parallel_size"] == 2
    assert sized.service["name"] == "qwen3-vl-32b" and sized.service["revision"] == "master"
    assert "max model len 16384" in sized.why


def test_a_model_that_fits_no_size_and_one_outside_the_catalog_are_refused(
    tmp_path: Path,
) -> None:
    found = report(tmp_path, "npu-smi", "npu-smi-info-910b4-x1.txt")
    with pytest.raises(AcceldeployError, match="fits no tensor parallel size on npu-01's 1"):
        draft.size_service([found], "ascend", spec("Qwen/Qwen3-VL-235B-A22B-Instruct"),
                           "/models", {"npu-01": {}})  # fmt: skip
    with pytest.raises(AcceldeployError, match="is not in the catalog"):
        draft.size_service([found], "ascend", spec("someone/unknown"), "/models",
                           {"npu-01": {}})  # fmt: skip


def init(tmp: Path, monkeypatch: pytest.MonkeyPatch, tools: Path | None, *extra: str) -> int:
    monkeypatch.setattr(probe, "run_ssh", local(tools))
    return main(["init", "demo", "-H", "npu-01=127.0.0.1:2299,npu-02=127.0.0.1:2298", "--user",
                 "ops", "--out", str(tmp / "demo"), *extra])  # fmt: skip


def test_init_writes_an_inventory_that_plan_render_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = fake_tool(tmp_path / "bin", "npu-smi", "npu-smi-info-910b1-x8.txt")
    site = tmp_path / "site.yml"
    site.write_text("service: {port: 8100}\nmodel_weights_hf_endpoint: http://127.0.0.1:8090\n")
    code = init(tmp_path, monkeypatch, tools, "--model", "Qwen/Qwen3-VL-32B-Instruct",
                "--source", "modelscope", "--vars", str(site))  # fmt: skip
    assert code == 0
    hosts = yaml.safe_load((tmp_path / "demo/hosts.yml").read_text())
    group = hosts["all"]["children"]["ascend"]
    assert group["vars"] == {"acceldeploy_platform": "ascend"}
    assert group["hosts"]["npu-02"]["ansible_port"] == 2298
    assert group["hosts"]["npu-02"]["ansible_become"] is True
    shared = yaml.safe_load((tmp_path / "demo/group_vars/all.yml").read_text())
    (service,) = shared["acceldeploy_services"]
    assert service["port"] == 8100 and service["devices"] == [0, 1]
    assert shared["model_weights_hf_endpoint"] == "http://127.0.0.1:8090"
    capsys.readouterr()
    assert main(["plan", "render", "-i", str(tmp_path / "demo"), "--host", "npu-02"]) == 0
    assert "--tensor-parallel-size 2" in capsys.readouterr().out
    assert init(tmp_path, monkeypatch, tools, "--model", "Qwen/Qwen3-VL-32B-Instruct") == 2
    assert "exists; pick another site name or --out, or --force" in capsys.readouterr().err


def test_refusals_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site.yml"
    site.write_text("acceldeploy_platform: cpu\n")
    gaudi = fake_tool(tmp_path / "bin", "hl-smi", "hl-smi-gaudi2-hl225-x8.txt")
    for tools, extra, said in (
        (None, ["--vars", str(site)], "acceldeploy_platform is init's to write"),
        (None, ["--name", "Bad_Name"], "--name 'Bad_Name'"),
        (gaudi, ["--platform", "gaudi"], "--model m/x is not in the catalog"),
    ):
        assert init(tmp_path, monkeypatch, tools, "--model", "m/x", *extra) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


def never(argv: Sequence[str], stdin: str) -> tuple[int, str, str]:
    raise AssertionError(f"a host was contacted: {argv}")


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--model", "m/x"], "--model m/x is not in the catalog"),
        (["--model", "m/x", "--platform", "ascend"], "--model m/x is not in the catalog"),
        (["--vars", "BINARY"], "not a text file (byte 0 is not UTF-8)"),
        (["--vars", "BROKEN"], "--vars "),
        (["--key", "/nonexistent/id_ed25519"], "--key /nonexistent/id_ed25519: no such file"),
        (["--out", "EXISTING"], "exists; pick another site name or --out, or --force"),
    ],
    ids=["model-outside-catalog", "model-outside-catalog-ascend", "binary-vars", "broken-vars",
         "missing-key", "existing-out"],
)  # fmt: skip
def test_what_the_controller_can_check_is_refused_before_any_host_is_contacted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    said: str,
) -> None:
    (tmp_path / "BINARY").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00\x00")  # an .xls
    (tmp_path / "BROKEN").write_text("a: [1, 2\n")
    (tmp_path / "EXISTING").mkdir()
    extra = [str(tmp_path / a) if a in ("BINARY", "BROKEN", "EXISTING") else a for a in extra]
    if "--model" not in extra:
        extra = ["--model", "Qwen/Qwen3-VL-32B-Instruct", *extra]
    monkeypatch.setattr(probe, "run_ssh", never)
    argv = ["init", "demo", "-H", "npu-01=127.0.0.1:2299", "--out", str(tmp_path / "demo")]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_platform_the_hosts_do_not_report_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = fake_tool(tmp_path / "bin", "npu-smi", "npu-smi-info-910b1-x8.txt")
    assert init(tmp_path, monkeypatch, tools, "--model", "Qwen/Qwen3-VL-32B-Instruct",
                "--platform", "gaudi") == 2  # fmt: skip
    assert "--platform gaudi: the hosts report ascend" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
