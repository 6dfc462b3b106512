"""python_env's fan-out: who builds and who pulls (runtimes/envfanout.py), and the host side
(fetch/envcopy.py): a build served as a tar stream for the run's token, pulled beside its
final place, checked against every RECORD, and renamed into place only when intact."""

from __future__ import annotations

import base64
import csv
import hashlib
import http.server
import io
import os
import socket
import tarfile
import threading
from pathlib import Path

import pytest

from acceldeploy.host.fetch.common import WeightsError
from acceldeploy.host.fetch.envcopy import make_env_server, pull_env, verify_records
from acceldeploy.runtimes.envfanout import plan


def host(name: str, rebuild: bool = True, key: str = "k1", **extra: object) -> dict[str, object]:
    spec = {"key": key, "staging": f"/opt/acceldeploy/venv-{key}", "manager": "venv"}
    return {
        "inventory_hostname": name,
        "python_env_rebuild": rebuild,
        "python_env_spec": spec,
        "ansible_host": f"10.0.0.{name[-1]}",
        **extra,
    }


def test_one_builder_per_class_the_rest_pull() -> None:
    roles = plan([host("h1"), host("h2"), host("h3", key="k2"), host("h4"), host("h5", False)])
    assert roles["h1"] == {"role": "build", "serves": True, "port": 8782}
    assert roles["h2"] == {"role": "pull", "from": "h1", "address": "10.0.0.1", "port": 8782}
    assert roles["h4"]["from"] == "h1"
    # The second class's builder serves on the next port (lab hosts may share one network).
    assert roles["h3"] == {"role": "build", "serves": False, "port": 8783}
    assert roles["h5"] == {"role": "none"}


def test_disabled_or_container_builds_everywhere() -> None:
    assert {r["role"] for r in plan([host("h1"), host("h2")], enabled=False).values()} == {"build"}
    container = host("h2")
    container["python_env_spec"] = {"key": "k1", "staging": "", "manager": "container"}
    assert plan([host("h1"), container])["h2"] == {"role": "build", "serves": False}


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def fake_env(root: Path) -> Path:
    """A venv-shaped tree: one installed distribution with its RECORD, a script, a symlink."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg-1.0.dist-info").mkdir()
    (root / "bin").mkdir()
    files = {
        "pkg/__init__.py": b"VALUE = 1\n",
        "pkg/data.bin": os.urandom(300_000),
        "../../../bin/pkg-cli": b"#!/opt/venv/bin/python\n",
        "pkg/a,b.json": b"{}",
        "pkg/__pycache__/__init__.cpython-311.pyc": b"stale after a recompile",
    }
    (site / "pkg" / "__pycache__").mkdir()
    for path, data in files.items():
        (site / path).write_bytes(data)
    rows = [[path, record_hash(data), str(len(data))] for path, data in files.items()]
    rows.append(["pkg-1.0.dist-info/RECORD", "", ""])
    with (site / "pkg-1.0.dist-info" / "RECORD").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    (site / "pkg/__pycache__/__init__.cpython-311.pyc").write_bytes(b"recompiled since")
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> tuple[str, Path]:
    built = fake_env(tmp_path / "builder" / "venv-k1")
    port = free_port()
    server, _ = make_env_server(built, "127.0.0.1", port, "t0ken")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}", built
    server.shutdown()


def test_pull_places_a_checked_copy(served: tuple[str, Path], tmp_path: Path) -> None:
    url, built = served
    staging = tmp_path / "puller" / "venv-k1"
    staging.parent.mkdir()
    result = pull_env(url, "t0ken", staging)
    assert result["record_files_checked"] == 4
    assert result["bytes"] > 300_000
    site = staging / "lib" / "python3.11" / "site-packages"
    assert (site / "pkg" / "data.bin").read_bytes() == (
        built / "lib/python3.11/site-packages/pkg/data.bin"
    ).read_bytes()
    assert os.readlink(staging / "bin" / "python") == "/usr/bin/python3"
    assert not staging.with_name("venv-k1.pulling").exists()


def test_wrong_token_leaves_nothing(served: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = served
    staging = tmp_path / "puller" / "venv-k1"
    staging.mkdir(parents=True)
    (staging / "old").write_text("previous build")
    with pytest.raises(OSError, match="401"):
        pull_env(url, "wrong", staging)
    assert (staging / "old").read_text() == "previous build"
    assert not staging.with_name("venv-k1.pulling").exists()


def test_a_damaged_build_is_refused(served: tuple[str, Path], tmp_path: Path) -> None:
    url, built = served
    (built / "lib/python3.11/site-packages/pkg/__init__.py").write_bytes(b"VALUE = 2\n")
    staging = tmp_path / "puller" / "venv-k1"
    staging.parent.mkdir()
    with pytest.raises(WeightsError, match=r"pkg/__init__.py differs from its RECORD"):
        pull_env(url, "t0ken", staging)
    assert not staging.exists()


def test_verify_records_names_a_missing_file(tmp_path: Path) -> None:
    env = fake_env(tmp_path / "venv")
    (env / "bin" / "pkg-cli").unlink()
    checked, problems = verify_records(env)
    assert checked == 3
    assert problems == ["pkg-1.0.dist-info: ../../../bin/pkg-cli missing"]


def serve_bytes(body: bytes) -> tuple[http.server.ThreadingHTTPServer, str]:
    """An HTTP server that answers every GET with ``body`` (a builder gone wrong)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def tar_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        # tar refuses a member that climbs out of the pull's directory
        (tar_of({"ok.txt": b"x", "../../escaped.txt": b"x"}), r"\.\."),
        # a stream cut short (the builder died mid-way)
        (tar_of({"big.bin": os.urandom(200_000)})[:150_000], "did not extract"),
    ],
)
def test_a_bad_stream_is_refused_and_leaves_nothing(tmp_path: Path, body: bytes, why: str) -> None:
    server, url = serve_bytes(body)
    staging = tmp_path / "a" / "b" / "venv-k1"
    staging.parent.mkdir(parents=True)
    try:
        with pytest.raises(WeightsError, match=why):
            pull_env(url, "t0ken", staging)
    finally:
        server.shutdown()
    assert not staging.exists() and not staging.with_name("venv-k1.pulling").exists()
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "a" / "escaped.txt").exists()
