"""gateway_tls_certificate read in preflight's first contact (acceldeploy.gateway.certificate):
the real probe run by this machine's sh on real PEM files made with openssl, and its verdicts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from acceldeploy.gateway import certificate

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def probe(path: Path) -> list[str]:
    done = subprocess.run(["sh", "-c", certificate.probe(str(path))], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return certificate.errors(done.stdout, str(path), "gw-01")


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a self-signed certificate, its key), as HAProxy's PEM takes them."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=gateway", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    return cert, key


def test_a_pem_with_certificate_and_key_passes(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    cert, key = pem
    both = tmp_path / "gateway.pem"
    both.write_text(cert.read_text() + key.read_text())
    assert probe(both) == []


def test_a_key_beside_the_certificate_passes(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    cert, key = pem
    shutil.copy(cert, tmp_path / "gateway.pem")
    shutil.copy(key, tmp_path / "gateway.pem.key")
    assert probe(tmp_path / "gateway.pem") == []


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d, c, k: d / "absent.pem", "gateway_tls_certificate {p} on gw-01: no such file"),
        (lambda d, c, k: d, "gateway_tls_certificate {p} on gw-01: not a regular file"),
        (lambda d, c, k: c, "holds no private key, and there is none in {p}.key beside it"),
        (lambda d, c, k: k, "holds no certificate (no -----BEGIN CERTIFICATE-----)"),
    ],
    ids=["missing", "directory", "certificate-only", "key-only"],
)  # fmt: skip
def test_what_haproxy_could_not_load_is_refused_naming_the_variable(
    tmp_path: Path, pem: tuple[Path, Path], make, said: str
) -> None:
    cert, key = pem
    target = make(tmp_path, cert, key)
    (error,) = probe(target)
    assert said.format(p=target) in error, error


def test_a_certificate_openssl_cannot_read_is_refused(
    tmp_path: Path, pem: tuple[Path, Path]
) -> None:
    _, key = pem
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
                      + key.read_text())  # fmt: skip
    (error,) = probe(broken)
    assert "openssl reads no current certificate from it (expired or malformed" in error


def test_a_path_with_quotes_stays_one_argument(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    odd = tmp_path / "it's.pem"
    assert probe(odd) == [f"gateway_tls_certificate {odd} on gw-01: no such file; put the PEM "
                          "(certificate, chain and key) there before the run, or leave "
                          "gateway_tls_certificate empty for no TLS"]  # fmt: skip
