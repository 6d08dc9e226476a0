"""``python -m tests.bench``: see tests/bench/run.py."""

import sys

from tests.bench.run import main

sys.exit(main())
