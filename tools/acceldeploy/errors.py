"""The one error type users see: a one-line reason that names what to change."""


class AcceldeployError(Exception):
    """Bad input or an impossible plan; the message is shown to the user as is."""
