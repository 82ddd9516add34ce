import sys

from synattn.cli.main import main

sys.exit(main())
