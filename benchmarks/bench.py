"""Compare interpexec's InterpreterPoolExecutor with the standard executors.

    python benchmarks/bench.py [--workers N] [--rounds R] [--quick] [--executors LIST]
                               [--json PATH] [--plot PATH]

A thin wrapper around ``python -m interpexec bench`` (the code lives in
``interpexec/_bench.py``, so an installed package can run it too) that writes the
JSON to ``benchmarks/results/bench-VERSION.json`` unless ``--json`` says otherwise.
``--help`` lists the metrics and the options.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

try:
    from interpexec import _bench
except ImportError:  # a checkout without interpexec installed: use the checkout
    _root = os.path.dirname(_HERE)
    sys.path.insert(0, _root)
    # The measurements run in child processes (python -m interpexec._bench): they
    # need to find the package too.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_root, os.environ.get("PYTHONPATH")) if p)
    from interpexec import _bench

if __name__ == "__main__":
    sys.exit(_bench.main(prog="benchmarks/bench.py", default_json_dir=os.path.join(_HERE, "results")))
