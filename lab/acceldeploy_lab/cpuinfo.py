"""The machine a lab proof ran on, in one line: its CPU model, how many CPUs, and the flags
vLLM's CPU kernels choose their paths by (AVX-512, its BF16 extension, AMX). Machines of this
kind differ (some Xeons have AMX, some CPUs not), and a proof's figures say on which it ran."""

from __future__ import annotations

from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def summary(cpuinfo: str | None = None) -> str:
    """'Intel(R) Xeon(R) Platinum 8481C, 2 CPUs; avx2 avx512f avx512_bf16 amx_tile ...; AMX'."""
    text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    blocks = [b for b in text.split("\n\n") if b.strip()]
    fields = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in blocks[0].splitlines())
    ) if blocks else {}  # fmt: skip
    present = set(fields.get("flags", "").split())
    shown = " ".join(f for f in FLAGS if f in present) or "none of " + " ".join(FLAGS)
    amx = "AMX" if "amx_tile" in present else "no AMX"
    model = fields.get("model name", "unknown CPU")
    count = f"{len(blocks)} CPU" + ("" if len(blocks) == 1 else "s")
    return f"{model}, {count}; {shown}; {amx}"


if __name__ == "__main__":
    print(summary())
