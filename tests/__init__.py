"""sm120patch's tests.

The tests start hundreds of interpreters (the CLI, the probes, fake ranks and servers). With
PYTHONDONTWRITEBYTECODE set, as in some CI images, each of them would compile sm120patch and the
test modules from source again; the tests let Python keep bytecode (in ``__pycache__``, which git
ignores) for themselves and every process they start.
"""

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
