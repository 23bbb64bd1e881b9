"""`python -m proxy`: the same commands as `context-proxy`."""

import sys

from proxy.cli import main

sys.exit(main())
