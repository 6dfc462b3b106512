#!/usr/bin/env python3
"""Load and memory on a fleet's services: vLLM's own benchmark, phases, verdict, plots."""

import sys

from acceldeploy.cli_bench import main

sys.exit(main())
