"""``python -m rtm_lakebase.jvm build``: compile the JVM sink and the fast foreach writer (see :mod:`.build`)."""

import sys

from rtm_lakebase.jvm.build import main

if __name__ == "__main__":
    sys.exit(main())
