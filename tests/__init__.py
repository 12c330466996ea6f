import os
from pathlib import Path

# The repository's top folder, wherever a test module sits below tests/.
REPO_ROOT = Path(__file__).resolve().parent.parent

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 set. Rich reads them once, when
# the command line's console is made (before any test), which would fix its width for every
# test that asks for another through CliRunner's environment.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)
