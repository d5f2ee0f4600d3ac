"""Runs the tests against the in-tree package (python/) and, unless FLASHTILE_LIBRARY says otherwise, the
library of the build tree, so `scripts/test.sh` needs no `pip install`. An installed flashtile is used when
FLASHTILE_TEST_INSTALLED=1."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("FLASHTILE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
    os.environ.setdefault("FLASHTILE_LIBRARY", os.path.join(ROOT, "build", "libflashtile.so"))
