from cachectl.main import main

raise SystemExit(main())
