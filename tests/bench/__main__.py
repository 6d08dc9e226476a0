"""``python -m tests.bench``: see tests/bench/run.py; ``python -m tests.bench soak --minutes N``:
the rolling-restart soak (tests/bench/bench_soak.py)."""

import sys

if sys.argv[1:2] == ["soak"]:
    from tests.bench.bench_soak import main as soak

    sys.exit(soak(sys.argv[2:]))

from tests.bench.run import main

sys.exit(main())
