from loghubd._entry import main

raise SystemExit(main())
