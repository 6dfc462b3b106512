"""python -m acceldeploy: the `acceldeploy` command."""

import sys

from acceldeploy.cli import main

sys.exit(main())
