"""`python -m webhook.cli`: the `mthreads-webhook` command."""

import sys

from . import main

sys.exit(main())
