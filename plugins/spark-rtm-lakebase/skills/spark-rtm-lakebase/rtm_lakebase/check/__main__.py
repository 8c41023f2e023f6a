"""``python3 -m rtm_lakebase.check FILE_OR_FOLDER...``: see :mod:`rtm_lakebase.check.cli`."""

import sys

from rtm_lakebase.check.cli import main

if __name__ == "__main__":
    sys.exit(main())
