"""``python -m swinkit.report.asv_offline``: see :mod:`swinkit.report.asv_offline.cli`."""
from swinkit.report.asv_offline.cli import main

raise SystemExit(main())
