#!/usr/bin/env python3
"""Check a deployed fleet: host state, every service's API, an opt-in memory probe."""

import sys

from acceldeploy.cli_verify import main

sys.exit(main())
