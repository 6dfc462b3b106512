"""A wheel's archive: the hash its RECORD gives each file, and the archive written atomically."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterable
from pathlib import Path

from acceldeploy.downloads.fetchlock import replacing


def record_hash(data: bytes) -> str:
    """A file's hash as a wheel's RECORD spells it."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write(target: Path, entries: Iterable[tuple[zipfile.ZipInfo, bytes]]) -> Path:
    """``target`` holding ``entries`` in their order; it appears complete or not at all."""
    with replacing(target) as tmp, zipfile.ZipFile(tmp, "w") as out:
        for entry, data in entries:
            out.writestr(entry, data)
    return target
