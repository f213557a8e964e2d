"""``python -m brace.cli``: the ``brace`` command."""

from . import main

raise SystemExit(main())
