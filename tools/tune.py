#!/usr/bin/env python3
"""Tune one service's flags under a latency SLA and a memory headroom (seed 002's loop)."""

import sys

from acceldeploy.cli_tune import main

sys.exit(main())
