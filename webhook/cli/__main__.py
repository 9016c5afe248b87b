"""`python -m webhook.cli`: the `mthreads-webhook` command."""

import sys

from .main import main

sys.exit(main())
