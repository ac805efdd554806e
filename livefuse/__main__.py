from livefuse.cli import main

raise SystemExit(main())
