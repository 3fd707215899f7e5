import sys

from rowbus.cli import main

sys.exit(main())
