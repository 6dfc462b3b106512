"""acceldeploy: bare Ascend / Gaudi servers to a tuned, verified fleet of vLLM services.

The command is ``acceldeploy`` (acceldeploy.cli). ``__version__`` is the one place the version
is written: pyproject.toml reads it (``[tool.setuptools.dynamic]``), so the installed
distribution's metadata (``importlib.metadata.version("acceldeploy")``) always agrees. This file
imports nothing: it is shipped to hosts with every call of the model_weights module."""

__version__ = "0.1.0"
