"""The one error type users see: a one-line reason that names what to change."""

from __future__ import annotations

from .secrets import mask


class AcceldeployError(Exception):
    """Bad input or an impossible plan; the message is shown to the user as is, with every
    credential in it masked (secrets.mask)."""

    def __init__(self, message: str) -> None:
        super().__init__(mask(str(message)))
