"""``python -m msgx_engine.cli``: the same as the ``msgx`` console script."""

import sys

from msgx_engine.cli.main import main

sys.exit(main())
