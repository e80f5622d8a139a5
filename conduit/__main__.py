"""``python -m conduit ...``: the thin entry into the CLI (``ops.entry``), the same as the ``conduit`` script.

The one import from the shared runtime package up into the entry points, allowed by name in
tests/unit/test_layers.py: nothing imports this module.
"""
from ops.entry import main

main()
