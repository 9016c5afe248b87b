"""`python -m webhook.allocator`: the same as `mthreads-webhook allocate`."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["allocate", *sys.argv[1:]]))
