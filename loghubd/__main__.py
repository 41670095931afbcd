from loghubd.cli import main

raise SystemExit(main())
