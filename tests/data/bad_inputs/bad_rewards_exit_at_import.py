"""A reward module that ends the process when it is imported (tests/test_preflight.py)."""

import sys

sys.exit(3)
