"""``python -m contextpolicy``: the command line."""

from .cli import main

raise SystemExit(main())
