"""Version strings and the ``key=value`` version files Ascend installs write.

``version_key`` orders Ascend-style versions (8.3.RC1 < 8.3.RC2 < 8.3.0); ``read_kv`` reads
``version.info`` / ``ascend_toolkit_install.info`` (also when posted with ``cat -n`` line
numbers); ``ranges`` / ``bracket_items`` read their ``[low,high]`` compatibility lists.
"""

from __future__ import annotations

import re


def normalize_name(name: str) -> str:
    """A Python distribution name as pip compares it: vllm_ascend -> vllm-ascend."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_key(text: str) -> tuple[tuple[float, int], ...]:
    """Orders Ascend-style versions: 8.3.RC1 < 8.3.RC2 < 8.3.0 < 8.5.0, 24.1.rc3 < 25.0.rc1.1,
    8.3.RC1.alpha002 < 8.3.RC1. Case-insensitive; unknown words sort before numbers."""
    parts: list[tuple[float, int]] = []
    for token in re.split(r"[.\-_]", text.strip().lower()):
        if not token:
            continue
        if token.isdigit():
            parts.append((2, int(token)))
            continue
        match = re.fullmatch(r"(rc|alpha|beta|b|t|spc)(\d*)", token)
        rank = {"alpha": -2, "beta": -1, "b": -1, "t": -1, "rc": 0, "spc": 3}.get(
            match.group(1) if match else "", -3
        )
        number = int(match.group(2)) if match and match.group(2) else 0
        parts.append((rank, number))
    return (*parts, (0.5, 0))


def same_version(a: str, b: str) -> bool:
    return version_key(a) == version_key(b)


def leading_numbers(text: str, width: int | None = None) -> tuple[int, ...]:
    """The numbers in ``text`` (the first ``width`` when given): 1.22.1-97ec -> (1, 22, 1)."""
    found = tuple(int(x) for x in re.findall(r"\d+", text))
    return found[:width] if width else found


CAT_N = re.compile(r"^\s*\d+(?:\t|\s{2,})(?=\S)")


def read_kv(text: str) -> dict[str, str]:
    """``key=value`` lines (``key : value`` too, as nnal/atb writes); comment lines skipped."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        # Tolerates `cat -n` line numbers, as version files are often posted.
        line = CAT_N.sub("", raw).strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line:
            key, _, value = line.partition("=")
        elif ":" in line:
            key, _, value = line.partition(":")
        else:
            continue
        values.setdefault(key.strip(), value.strip())
    return values


def bracket_items(text: str) -> list[str]:
    """``[V100R001C13],[V100R001C15]`` -> the items; ``[7.0.0,7.5.99]`` -> one item."""
    return [item.strip() for item in re.findall(r"\[([^\]]*)\]", text or "")]


def ranges(text: str) -> list[tuple[str, str]]:
    """``[6.4.0,6.4.99],[7.0.0,7.7.99]`` -> [(6.4.0, 6.4.99), (7.0.0, 7.7.99)]."""
    found = []
    for item in bracket_items(text):
        low, _, high = item.partition(",")
        found.append((low.strip(), high.strip() or low.strip()))
    return found


def innerversion_family(innerversion: str) -> str:
    """V100R001C19SPC001B124 -> V100R001C19 (the release the compatibility lists name)."""
    match = re.match(r"(V\d+R\d+C\d+)", innerversion.strip(), re.IGNORECASE)
    return match.group(1).upper() if match else innerversion.strip()


def families(text: str) -> tuple[str, ...]:
    """``[V100R001C19SPC001],[V100R001C21]`` -> ("V100R001C19", "V100R001C21")."""
    return tuple(innerversion_family(x) for x in bracket_items(text))
