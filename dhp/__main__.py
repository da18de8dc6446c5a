"""``python -m dhp``: see :mod:`dhp.cli`."""

from dhp.cli import main

raise SystemExit(main())
