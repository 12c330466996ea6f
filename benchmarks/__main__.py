"""``python -m benchmarks [--quick] [--out DIR] [--sections a,b] [--list]``."""

from __future__ import annotations

import sys

from benchmarks.runner import main

# The guard matters: the fleet section starts processes with the spawn method, and each of
# them imports this module again (as ``__mp_main__``); it must not start another benchmark.
if __name__ == "__main__":
    sys.exit(main())
