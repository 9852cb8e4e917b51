from lengthgen.cli import main

raise SystemExit(main())
