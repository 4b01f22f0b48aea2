import sys

from agenttrace.cli import main

sys.exit(main())
