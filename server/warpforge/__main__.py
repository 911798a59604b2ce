"""``python -m warpforge`` runs the command line."""

from warpforge.cli import main

raise SystemExit(main())
