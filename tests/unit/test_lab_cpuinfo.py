"""acceldeploy_lab.cpuinfo: the line a lab proof prints about the machine it ran on."""

from __future__ import annotations

from acceldeploy_lab import cpuinfo

XEON = "\n\n".join(
    f"processor\t: {n}\nvendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"
    "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8 avx512_fp16\n"
    for n in range(2)
)
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"


def test_a_xeon_with_amx_says_so() -> None:
    assert cpuinfo.summary(XEON) == (
        "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, 2 CPUs; "
        "avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8; AMX"
    )


def test_a_cpu_without_amx_says_so() -> None:
    assert cpuinfo.summary(EPYC) == "AMD EPYC, 1 CPU; avx2 avx512f avx512_bf16; no AMX"


def test_this_machine_reads() -> None:
    assert cpuinfo.summary().endswith(("; AMX", "; no AMX"))
