"""`python -m webhook.extender`: the same as `mthreads-webhook extender`."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["extender", *sys.argv[1:]]))
