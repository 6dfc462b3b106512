"""The vendors' device exporters the monitor role deploys (acceldeploy.monitor.device_exporters):
which host runs which, from the operator's artefact; their command lines and addresses; the
archive's binary picked out as the host does it; the refusals, naming the variable; their
units rendered through the role's templates and checked by `systemd-analyze verify`. No NPU or
HPU is here: the units are checked, not run."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import jinja2
import pytest

from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError
from acceldeploy.monitor import device_exporters, rules, targets
from acceldeploy.platforms import PLATFORMS, for_name
from acceldeploy.platforms.ascend import exporter as npu_exporter
from acceldeploy.platforms.exporter import exec_line
from acceldeploy.platforms.gaudi import exporter as gaudi_exporter
from acceldeploy.serving import selection

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "roles/monitor/templates"
TASKS = ROOT / "roles/monitor/tasks"
IMAGE = "vault.habana.ai/gaudi-metric-exporter/metric-exporter:1.23.0-695"
MONITOR = {"group_names": ["monitors"], "ansible_host": "192.0.2.5"}


def ascend(**extra: Any) -> dict[str, Any]:
    return {"group_names": ["ascend"], "ansible_host": "192.0.2.11",
            "acceldeploy_platform": "ascend", **extra}  # fmt: skip


def gaudi(**extra: Any) -> dict[str, Any]:
    return {"group_names": ["gaudi"], "ansible_host": "192.0.2.21",
            "acceldeploy_platform": "gaudi", **extra}  # fmt: skip


def binary(tmp_path: Path) -> Path:
    path = tmp_path / "npu-exporter"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refused(hostvars: dict[str, Any], host: str = "npu-01") -> str:
    with pytest.raises(AcceldeployError) as caught:
        device_exporters.plan(host, hostvars)
    return str(caught.value)


# --------------------------------------------------------------------------------------------
# Which host runs which


def test_an_ascend_host_runs_npu_exporter_from_a_binary_on_the_controller(tmp_path: Path) -> None:
    package = binary(tmp_path)
    plan = device_exporters.plan("npu-01", ascend(monitor_npu_exporter_package=str(package)))
    assert plan["exporter"] == "npu" and plan["unit"] == "npu-exporter.service"
    assert plan["tasks"] == "npu_exporter.yml"  # what roles/monitor/tasks/converge.yml includes
    assert plan["package"] == {
        "variable": "monitor_npu_exporter_package", "location": str(package), "checksum": "",
        "remote": False, "path": "/var/cache/acceldeploy/monitor/npu-exporter", "archive": False,
    }  # fmt: skip
    assert plan["installed_from"] == "/var/cache/acceldeploy/monitor/npu-exporter"
    assert plan["extract_argv"] == []
    # the host's private address, as node exporter binds it
    assert plan["argv"] == ["/usr/local/bin/npu-exporter", "-ip=192.0.2.11", "-port=8082",
                            "-updateTime=5",
                            "-logFile=/var/log/mindx-dl/npu-exporter/npu-exporter.log"]  # fmt: skip


def test_an_archive_at_a_url_is_downloaded_then_unpacked() -> None:
    url = "https://repo.example/mindx/Ascend-mindxdl-npu-exporter_7.3.0_linux-aarch64.zip"
    plan = device_exporters.plan("npu-01", ascend(
        acceldeploy_node_ip="10.0.0.11", monitor_npu_exporter_package=url,
        monitor_npu_exporter_checksum="A" * 64, monitor_npu_exporter_update_time=10,
        monitor_npu_exporter_args=["-containerMode=containerd"]))  # fmt: skip
    package = plan["package"]
    assert package["remote"] and package["archive"] and package["checksum"] == "a" * 64
    assert package["path"] == (
        "/var/cache/acceldeploy/monitor/Ascend-mindxdl-npu-exporter_7.3.0_linux-aarch64.zip"
    )
    unpacked = package["path"] + ".d/npu-exporter"
    assert plan["unpacked"] == plan["installed_from"] == unpacked
    assert plan["extract_argv"][-3:] == [package["path"], "npu-exporter", unpacked]
    assert plan["argv"][1:4] == ["-ip=10.0.0.11", "-port=8082", "-updateTime=10"]
    assert plan["argv"][-1] == "-containerMode=containerd"


def test_a_gaudi_host_runs_the_image_published_on_its_private_address() -> None:
    plan = device_exporters.plan("hpu-01", gaudi(monitor_gaudi_exporter_image=IMAGE))
    assert plan["argv"] == [
        "/usr/bin/docker", "run", "--rm", "--name", "acceldeploy-gaudi-exporter",
        "--pull=never", "--privileged", "-v", "/dev:/dev", "-p", "192.0.2.21:41611:41611",
        IMAGE, "--port", "41611",
    ]  # fmt: skip
    assert plan["tarball"] is None
    assert plan["load_argv"] == ["/usr/bin/docker", "pull", IMAGE]
    assert plan["tasks"] == "gaudi_exporter.yml"


def test_a_gaudi_image_from_a_tarball_on_the_controller(tmp_path: Path) -> None:
    tarball = tmp_path / "metric-exporter.tar"
    tarball.write_bytes(b"not really a docker save")
    plan = device_exporters.plan("hpu-01", gaudi(
        acceldeploy_node_ip="fd00::21", monitor_gaudi_exporter_image=IMAGE,
        monitor_gaudi_exporter_image_tarball=str(tarball),
        monitor_gaudi_exporter_image_tarball_checksum=sha256(tarball)))  # fmt: skip
    assert plan["load_argv"] == [
        "/usr/bin/docker",
        "load",
        "--input",
        "/var/cache/acceldeploy/monitor/metric-exporter.tar",
    ]
    assert "[fd00::21]:41611:41611" in plan["argv"]


def test_cpu_hosts_gateways_and_monitors_run_none(tmp_path: Path) -> None:
    package = str(binary(tmp_path))
    assert device_exporters.plan("lab1", {"acceldeploy_platform": "cpu"}) == {"exporter": ""}
    assert device_exporters.plan("npu-01", ascend()) == {"exporter": ""}
    # a monitor inheriting the Ascend fleet's group_vars runs none and is not refused
    inherited = {**ascend(monitor_npu_exporter_package=package), **MONITOR}
    assert device_exporters.plan("mon-01", inherited) == {"exporter": ""}


# --------------------------------------------------------------------------------------------
# The refusals, before any host changes


@pytest.mark.parametrize(
    ("hostvars", "says"),
    [
        (ascend(monitor_npu_exporter_package="https://repo.example/npu-exporter"),
         "npu-01: monitor_npu_exporter_package is a URL (https://repo.example/npu-exporter) but "
         "monitor_npu_exporter_checksum is empty: give the sha256"),
        ({"acceldeploy_platform": "cpu", "monitor_npu_exporter_package": "/srv/npu-exporter"},
         "npu-01: monitor_npu_exporter_package is set but its acceldeploy_platform is cpu; that "
         "exporter runs on ascend hosts only: set monitor_npu_exporter_package in the "
         "group_vars of the ascend hosts"),
        (gaudi(monitor_npu_exporter_package="/srv/npu-exporter"),
         "acceldeploy_platform is gaudi; that exporter runs on ascend hosts only"),
        (ascend(monitor_gaudi_exporter_image=IMAGE),
         "monitor_gaudi_exporter_image is set but its acceldeploy_platform is ascend"),
        (ascend(monitor_npu_exporter_package="npu-exporter"),
         "monitor_npu_exporter_package must be an absolute path on the controller or an "
         "http(s) URL"),
        (ascend(monitor_npu_exporter_package="/nonexistent/npu-exporter"),
         "monitor_npu_exporter_package: /nonexistent/npu-exporter is not a file on the "
         "controller"),
        (ascend(monitor_npu_exporter_package="https://r/x.zip", monitor_npu_exporter_checksum="abc"),
         "monitor_npu_exporter_checksum must be the sha256 of monitor_npu_exporter_package (64 "
         "hex digits), got 'abc'"),
        (gaudi(monitor_gaudi_exporter_image_tarball="/srv/exporter.tar"),
         "hpu-01: monitor_gaudi_exporter_image_tarball is set but monitor_gaudi_exporter_image "
         "is empty: name the image the tarball holds"),
        (gaudi(monitor_gaudi_exporter_image="Not An Image"),
         "monitor_gaudi_exporter_image 'Not An Image' is not an image reference"),
        (gaudi(monitor_gaudi_exporter_image=IMAGE,
               monitor_gaudi_exporter_image_tarball="https://repo.example/exporter.tar"),
         "monitor_gaudi_exporter_image_tarball is a URL (https://repo.example/exporter.tar) but "
         "monitor_gaudi_exporter_image_tarball_checksum is empty"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_variable(hostvars: dict[str, Any], says: str) -> None:
    host = "hpu-01" if hostvars.get("acceldeploy_platform") == "gaudi" else "npu-01"
    message = refused(hostvars, host)
    assert says in message
    assert message.startswith(f"{host}: ")


def test_a_package_that_does_not_match_its_checksum_is_refused(tmp_path: Path) -> None:
    package = binary(tmp_path)
    message = refused(ascend(monitor_npu_exporter_package=str(package),
                             monitor_npu_exporter_checksum="0" * 64))  # fmt: skip
    assert (
        f"monitor_npu_exporter_package: {package} does not match monitor_npu_exporter_checksum"
        in message
    )
    good = ascend(monitor_npu_exporter_package=str(package),
                  monitor_npu_exporter_checksum=sha256(package))  # fmt: skip
    assert device_exporters.plan("npu-01", good)["exporter"] == "npu"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"monitor_npu_exporter_port": 80},
         "monitor_npu_exporter_port 80 is outside 1025-40000, the ports npu-exporter accepts"),
        ({"monitor_npu_exporter_update_time": 0},
         "monitor_npu_exporter_update_time must be whole seconds from 1 to 60"),
        ({"monitor_npu_exporter_args": ["-ip=0.0.0.0"]},
         "monitor_npu_exporter_args sets '-ip=0.0.0.0', which the role decides"),
        ({"monitor_npu_exporter_args": "-containerMode=containerd"},
         "monitor_npu_exporter_args must be a list of npu-exporter flags"),
        ({"acceldeploy_node_ip": "fd00::11"},
         "npu-exporter listens on an IPv4 address only"),
        ({"ansible_host": "npu-01.example"},
         "ansible_host is 'npu-01.example', not an IP address"),
        ({"monitor_npu_exporter_bin": "npu-exporter"},
         "monitor_npu_exporter_bin must be an absolute path"),
    ],
)  # fmt: skip
def test_npu_exporters_own_limits_are_refused(
    tmp_path: Path, extra: dict[str, Any], says: str
) -> None:
    assert says in refused(ascend(monitor_npu_exporter_package=str(binary(tmp_path)), **extra))


# --------------------------------------------------------------------------------------------
# The monitors' targets: deploying means scraping, and preflight refuses the same mistakes


def fleet(**npu_vars: Any) -> dict[str, dict[str, Any]]:
    every = selection.every_host(str(ROOT / "inventory/examples/ascend-910b/hosts.yml"))
    every["mon-01"] = dict(MONITOR)
    for host, hostvars in every.items():
        hostvars["acceldeploy_services"] = [
            {**s, "host": "0.0.0.0", "api_key": "sk-0123456789abcdef"}
            for s in hostvars.get("acceldeploy_services") or []
        ]
        if host != "mon-01":
            hostvars.update(npu_vars)
    return every


def test_a_deployed_exporter_is_scraped_without_monitor_device_exporters(tmp_path: Path) -> None:
    assert targets.file_sd(targets.targets(fleet()))["npu"] == []
    package = str(binary(tmp_path))
    sd = targets.file_sd(targets.targets(fleet(monitor_npu_exporter_package=package)))
    assert [g["targets"] for g in sd["npu"]] == [["192.0.2.11:8082"], ["192.0.2.12:8082"]]


def test_preflight_refuses_a_hosts_exporter_inputs() -> None:
    every = fleet(monitor_npu_exporter_package="https://repo.example/npu-exporter.zip")
    with pytest.raises(AcceldeployError, match="npu-01: monitor_npu_exporter_package is a URL"):
        targets.targets(every)


# --------------------------------------------------------------------------------------------
# The archive's binary, picked out as the host does it


def run_extract(archive: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", npu_exporter.EXTRACT_MEMBER, str(archive),
            "npu-exporter", str(dest)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_the_binary_comes_out_of_a_zip_or_a_tar_gz_wherever_it_is(tmp_path: Path) -> None:
    content = b"\x7fELF npu-exporter"
    zipped = tmp_path / "Ascend-mindxdl-npu-exporter_7.3.0_linux-x86_64.zip"
    with zipfile.ZipFile(zipped, "w") as box:
        box.writestr("npu-exporter-v7.3.0.yaml", "kind: DaemonSet\n")
        box.writestr("npu-exporter", content)
    tarred = tmp_path / "npu-exporter.tar.gz"
    with tarfile.open(tarred, "w:gz") as box:
        info = tarfile.TarInfo("mindx/npu-exporter")
        info.size = len(content)
        box.addfile(info, io.BytesIO(content))
    for archive in (zipped, tarred):
        dest = tmp_path / f"{archive.name}.bin"
        done = run_extract(archive, dest)
        assert done.returncode == 0, done.stderr
        assert dest.read_bytes() == content


def test_an_archive_without_the_binary_fails_saying_so(tmp_path: Path) -> None:
    zipped = tmp_path / "other.zip"
    with zipfile.ZipFile(zipped, "w") as box:
        box.writestr("device-plugin", b"")
    done = run_extract(zipped, tmp_path / "out")
    assert done.returncode == 1
    assert "holds 0 files named npu-exporter, not one" in done.stderr
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# The units, through the role's templates


def render(template: str, unit: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)  # fmt: skip
    context = {"ansible_managed": "Managed by acceldeploy", "monitor_device_exporter_unit": unit}
    return env.get_template(template).render(context)


def npu_unit_text(tmp_path: Path) -> str:
    package = binary(tmp_path)
    plan = device_exporters.plan("npu-01", ascend(monitor_npu_exporter_package=str(package),
                                                  monitor_npu_exporter_bin=str(package)))  # fmt: skip
    unit = device_exporters.unit(plan, ["192.0.2.5"], ["/dev/davinci10", "/dev/davinci2",
                                                       "/dev/davinci_manager"])  # fmt: skip
    return render("npu-exporter.service.j2", unit)


def test_the_npu_exporter_unit(tmp_path: Path) -> None:
    text = npu_unit_text(tmp_path)
    assert f"ExecStart={tmp_path}/npu-exporter -ip=192.0.2.11 -port=8082" in text
    assert 'Environment="LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64/driver:' in text
    assert "LogsDirectory=mindx-dl/npu-exporter\n" in text
    devices = [line for line in text.splitlines() if line.startswith("DeviceAllow=")]
    assert devices == [f"DeviceAllow={d} rw" for d in ("/dev/davinci_manager", "/dev/devmm_svm",
                       "/dev/hisi_hdc", "/dev/davinci2", "/dev/davinci10")]  # fmt: skip
    assert "IPAddressDeny=any\nIPAddressAllow=localhost 192.0.2.11 192.0.2.5\n" in text


def test_the_gaudi_exporter_unit() -> None:
    plan = device_exporters.plan("hpu-01", gaudi(monitor_gaudi_exporter_image=IMAGE))
    text = render("gaudi-metric-exporter.service.j2", device_exporters.unit(plan, ["192.0.2.5"]))
    assert "ExecStartPre=-/usr/bin/docker rm -f acceldeploy-gaudi-exporter\n" in text
    assert "-p 192.0.2.21:41611:41611 " + IMAGE + " --port 41611\n" in text
    assert "ExecStop=/usr/bin/docker stop acceldeploy-gaudi-exporter\n" in text
    assert "RestrictAddressFamilies=AF_UNIX\n" in text  # the docker client only


def test_a_percent_in_a_flag_is_kept_from_systemds_specifiers() -> None:
    assert exec_line(["/bin/x", "-a=50%", "two words"]) == ("/bin/x -a=50%% 'two words'")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
@pytest.mark.parametrize("exporter", ["npu", "gaudi"])
def test_rendered_units_pass_systemd_analyze_verify(tmp_path: Path, exporter: str) -> None:
    if exporter == "npu":
        name, text = "npu-exporter.service", npu_unit_text(tmp_path)
    else:
        plan = device_exporters.plan("hpu-01", gaudi(monitor_gaudi_exporter_image=IMAGE))
        text = render("gaudi-metric-exporter.service.j2", device_exporters.unit(plan, []))
        # verify resolves every Exec*= command and Requires=: docker is not installed here
        docker = binary(tmp_path).rename(tmp_path / "docker")
        text = text.replace(gaudi_exporter.DOCKER, str(docker))
        (tmp_path / "docker.service").write_text(f"[Service]\nExecStart={docker}\n")
        name = "gaudi-metric-exporter.service"
    unit_file = tmp_path / name
    unit_file.write_text(text)
    os.chmod(unit_file, 0o644)
    done = subprocess.run(["systemd-analyze", "verify", str(unit_file)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert name not in done.stderr, done.stderr


# --------------------------------------------------------------------------------------------
# The recorded metric names


def test_the_alert_rules_use_recorded_metric_names_only() -> None:
    assert rules.NPU_HBM_USED_MB in device_exporters.metric_names("npu")
    assert rules.GAUDI_MEMORY_USED in device_exporters.metric_names("gaudi")
    for job in device_exporters.EXPORTERS:
        assert all(name.startswith(("npu_chip_info_", "machine_npu", "habanalabs_"))
                   for name in device_exporters.metric_names(job))  # fmt: skip


def test_each_platform_s_class_names_its_exporter_as_the_recorded_list_does() -> None:
    """The platform's class says which exporter its hosts run; data/device-exporters.yml, which
    records each one from the vendor's documentation, names the same platform."""
    recorded = load("device-exporters")
    named = {p.device_exporter.job: p.name for p in PLATFORMS if p.device_exporter}
    assert named == {job: entry["platform"] for job, entry in recorded.items()}
    assert set(named) == set(device_exporters.EXPORTERS)
    assert for_name("ascend").device_exporter is device_exporters.EXPORTERS["npu"]
    assert for_name("gaudi").device_exporter is device_exporters.EXPORTERS["gaudi"]
    assert for_name("cpu").device_exporter is None
    assert device_exporters.of_platform("cpu") is device_exporters.of_platform("tpu") is None
    for job, exporter in device_exporters.EXPORTERS.items():
        assert exporter.job == job and (TASKS / exporter.tasks).is_file()
        assert exporter.variables[0] in device_exporters.VIEW_KEYS
