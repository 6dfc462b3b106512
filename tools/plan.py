#!/usr/bin/env python3
"""Size KV caches, explain vLLM start-up logs, render services: see `plan.py -h`."""

import sys

from acceldeploy.cli_plan import main

sys.exit(main())
