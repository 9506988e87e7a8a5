from swinkit.cli import main

raise SystemExit(main())
