"""A service's process killed by a signal, read from its journal. The units start Python with
PYTHONFAULTHANDLER=1 (serving.render.service_env), so a vLLM worker that dies of SIGSEGV,
SIGILL, SIGBUS, SIGFPE or SIGABRT first writes "Fatal Python error: <the signal's name>" and the
Python stack of the thread that died; vLLM itself only says "Worker proc ... died unexpectedly
(exit code: None)". The gate's report names the signal and the innermost frame in one line."""

from __future__ import annotations

import re
from collections.abc import Sequence

SIGNALS = {
    "Segmentation fault": "SIGSEGV",
    "Illegal instruction": "SIGILL",
    "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
    "Aborted": "SIGABRT",
}
# What the signal says beyond its name.
HINTS = {
    "SIGILL": (
        ": an instruction the CPU refused (on a CPU with AMX, tile registers used without the "
        "kernel's permission: see the stack's known defects, acceldeploy plan stacks)"
    ),
}
FATAL = re.compile(r"Fatal Python error: (?P<name>[A-Za-z -]+?)\s*$")
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def fatal_error(journal: Sequence[str]) -> str:
    """'a process died of SIGILL (Illegal instruction) in <func> (<file>:<line>)', or ''."""
    lines = [str(line) for line in journal]
    found = ""
    for index, line in enumerate(lines):
        match = FATAL.search(line)
        if not match:
            continue
        name = match.group("name")
        signal = SIGNALS.get(name)
        said = f"{signal} ({name})" if signal else name
        block = lines[index + 1 : index + 400]
        current = next((i for i, text in enumerate(block) if "Current thread" in text), -1)
        frames = block[current + 1 :] if current >= 0 else block
        stack = [m for m in map(FRAME.match, frames[:60]) if m]
        # The innermost frame of the engine's own code (a wait in threading.py tells nothing).
        frame = next((m for m in stack if "-packages/" in m["file"]), stack[0] if stack else None)
        where = f" in {frame['func']} ({frame['file']}:{frame['line']})" if frame else ""
        hint = HINTS.get(signal or "", "")
        found = f"a process of the service died of {said}{where}{hint}"
    return found
