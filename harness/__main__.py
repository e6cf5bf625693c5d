"""`graphsafe`: see graphsafe.cli."""

import sys

from graphsafe.cli import main

sys.exit(main())
