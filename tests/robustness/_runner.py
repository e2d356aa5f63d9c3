"""Run one corpus case in this process and print its outcome as JSON (the parent sets the limits).

Usage: ``python _runner.py CASE_NAME SCRATCH_DIR``. Running as root, the read-only cache cases drop to the
``nobody`` user after their setup, since permission bits do not bind root.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _corpus import CASES
from _outcome import outcome

if __name__ == "__main__":
    name, scratch = sys.argv[1], Path(sys.argv[2])
    if CASES[name].setup is not None:
        CASES[name].setup(scratch)
    if name.startswith("read_only") and os.geteuid() == 0:
        # Import what the case needs first: the interpreter may live where 'nobody' cannot read (/root).
        from _corpus import CPU, tiny_cnn, x32

        import amdinfer

        amdinfer.load(tiny_cnn(), cache=False, **CPU).run(x32())
        os.setgid(65534)
        os.setuid(65534)
    print("\n" + json.dumps(outcome(CASES[name], scratch)), flush=True)
