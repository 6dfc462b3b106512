"""The apt repositories a bundle carries (acceldeploy.downloads.osrepo, bundle/ospackages.py):
real apt-get and apt-ftparchive against a small local archive of real .debs, with every
dependency (nothing installed) or only what a dpkg status lacks; which hosts need which
repository; and preflight's refusal of a bundle without them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from acceldeploy.bundle import ospackages
from acceldeploy.downloads import osrepo
from acceldeploy.errors import AcceldeployError

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("apt-get", "apt-ftparchive", "dpkg-deb")),
    reason="needs apt-get, apt-ftparchive and dpkg-deb (make host-deps: apt-utils)",
)


def deb(where: Path, name: str, depends: str = "") -> None:
    root = where / f"{name}-build"
    (root / "DEBIAN").mkdir(parents=True)
    control = f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\n"
    control += f"Description: test package {name}\n" + (f"Depends: {depends}\n" if depends else "")
    (root / "DEBIAN" / "control").write_text(control)
    subprocess.run(["dpkg-deb", "-b", str(root), str(where / f"{name}_1.0_all.deb")],
                   check=True, capture_output=True)  # fmt: skip
    shutil.rmtree(root)


@pytest.fixture
def archive(tmp_path: Path) -> str:
    """A flat archive of three packages: haproxy-t depends on liblua-t, which needs libc-t."""
    where = tmp_path / "archive"
    where.mkdir()
    deb(where, "libc-t")
    deb(where, "liblua-t", "libc-t")
    deb(where, "haproxy-t", "liblua-t")
    deb(where, "unrelated-t")
    index = subprocess.run(["apt-ftparchive", "packages", "."], cwd=where, check=True,
                           capture_output=True, text=True).stdout  # fmt: skip
    (where / "Packages").write_text(index)
    return f"deb [trusted=yes] copy://{where} ./\n"  # copy: apt fetches into its archives


def test_every_dependency_when_nothing_is_installed(tmp_path: Path, archive: str) -> None:
    target = tmp_path / "os" / "bookworm-amd64"
    got = osrepo.ensure(target, archive, ("haproxy-t",))
    assert got["built"] and sorted(got["debs"]) == [
        "haproxy-t_1.0_all.deb", "libc-t_1.0_all.deb", "liblua-t_1.0_all.deb"]  # fmt: skip
    assert ospackages.indexed(target / "Packages") == {"haproxy-t", "liblua-t", "libc-t"}
    assert "SHA256:" in (target / "Release").read_text()
    assert not target.with_name("bookworm-amd64.partial").exists()
    again = osrepo.ensure(target, archive, ("haproxy-t",))
    assert not again["built"]  # the recipe holds: nothing fetched


def test_only_what_a_status_lacks(tmp_path: Path, archive: str) -> None:
    status = tmp_path / "status"
    status.write_text("Package: libc-t\nStatus: install ok installed\nVersion: 1.0\n"
                      "Architecture: all\nMaintainer: t <t@t>\nDescription: x\n\n")  # fmt: skip
    got = osrepo.ensure(tmp_path / "os" / "r", archive, ("haproxy-t",), status=status)
    assert sorted(got["debs"]) == ["haproxy-t_1.0_all.deb", "liblua-t_1.0_all.deb"]


def test_a_package_the_archive_lacks_leaves_nothing_behind(tmp_path: Path, archive: str) -> None:
    target = tmp_path / "os" / "r"
    with pytest.raises(osrepo.OsRepoError, match="apt-get download of nginx-t"):
        osrepo.ensure(target, archive, ("nginx-t",))
    assert not target.exists() and not target.with_name("r.partial").exists()


GW = {"group_names": ["gateways"], "acceldeploy_os": "debian-12"}


def test_the_gateways_need_haproxy_for_their_release_and_arch() -> None:
    hosts = {"gw1": GW, "gw2": {**GW, "acceldeploy_arch": "aarch64"},
             "gw3": {**GW, "acceldeploy_os": "ubuntu-22.04"},
             "npu1": {"group_names": ["ascend"], "acceldeploy_os": "debian-12"}}  # fmt: skip
    repos, notes = ospackages.wanted(hosts)
    assert [(r.name, r.packages, r.hosts) for r in repos] == [
        ("bookworm-amd64", ("haproxy",), ("gw1",)), ("bookworm-arm64", ("haproxy",), ("gw2",))]  # fmt: skip
    assert notes == ["gw3: the bundle carries apt packages for debian-11, debian-12, debian-13 "
                     "only; install haproxy on this ubuntu-22.04 host from the site's own "
                     "mirror before the run"]  # fmt: skip
    with pytest.raises(AcceldeployError, match="gw1: acceldeploy_os is not set"):
        ospackages.wanted({"gw1": {"group_names": ["gateways"]}})


def test_preflight_names_a_gateway_whose_packages_the_bundle_lacks(tmp_path: Path) -> None:
    (repo,) = ospackages.wanted({"gw1": GW})[0]
    fix = "acceldeploy bundle build -i inv --out B"
    assert ospackages.errors(tmp_path, [repo], fix) == [
        f"the bundle {tmp_path} has no haproxy for gw1 (apt packages for bookworm-amd64); "
        f"add them with `{fix}`"]  # fmt: skip
    index = tmp_path / "os" / "bookworm-amd64" / "Packages"
    index.parent.mkdir(parents=True)
    index.write_text("Package: haproxy\nVersion: 2.6\n\nPackage: liblua5.3-0\n")
    assert ospackages.errors(tmp_path, [repo], fix) == []
