"""python -m acceldeploy.cli: the `acceldeploy` command."""

import sys

from acceldeploy.cli import main

sys.exit(main())
