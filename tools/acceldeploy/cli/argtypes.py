"""argparse types that range-check numbers and read times, so a CLI refuses a bad value (exit 2,
the flag named) before it reads an inventory or contacts a host."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

from acceldeploy.errors import AcceldeployError
from acceldeploy.monitor import rules
from acceldeploy.secrets import mask


def bounded(
    kind: type[int] | type[float], low: float, high: float | None = None, *, above: bool = False
) -> Callable[[str], int | float]:
    """A type for `low <= x` (`low < x` with above) and `x <= high` when high is given."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {noun}, got {text!r}") from None
        if value != value or (above and value <= low) or (not above and value < low):
            if low == 0 and not above:
                raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
            raise argparse.ArgumentTypeError(
                f"must be {'>' if above else '>='} {low:g}, got {text}"
            )
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


@dataclass(frozen=True)
class Moment:
    """A time given on the command line: a duration back from now (`ago`) or a time (`at`)."""

    ago: float = 0.0
    at: float | None = None

    def resolve(self, now: float) -> float:
        """Unix seconds."""
        return now - self.ago if self.at is None else self.at


def moment(text: str) -> Moment:
    """`now`, a duration back from now (30m, 24h, 7d) or a time, ISO 8601 (UTC unless it
    names its zone)."""
    if text == "now":
        return Moment()
    try:
        return Moment(ago=rules.seconds(text, "time"))
    except AcceldeployError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be now, a duration back from now (30m, 24h, 7d) or a UTC time "
            f"(2026-11-26T14:00), got {text!r}"
        ) from None
    return Moment(at=(at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp())


def usage_error(prog: str, message: str) -> NoReturn:
    """Exit 2 with one line on stderr: `PROG: error: MESSAGE (see PROG --help)`, masked."""
    sys.stderr.write(f"{prog}: error: {mask(message)} (see {prog} --help)\n")
    sys.exit(2)


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line naming the flag (exit 2), like the tools' other errors, with
    any credential on the command line masked (`--api-key <token>` is not echoed)."""

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, message)
