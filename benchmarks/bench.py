"""Compare interpexec's InterpreterPoolExecutor with the standard executors.

    python benchmarks/bench.py [--workers N] [--rounds R] [--quick] [--executors LIST]
                               [--json PATH] [--plot PATH] [--timeout SECONDS] [--strict]

The harness lives in ``benchmarks/harness/`` (see its ``__init__``); the tasks in
``benchmarks/_tasks.py``.  Writes the JSON to ``benchmarks/results/bench-VERSION.json``
unless ``--json`` says otherwise.  ``--help`` lists the metrics and the options.
(``interpexec bench``, in the installed package, is a much smaller self-check.)
"""

from __future__ import annotations

import sys

import _util

if __name__ == "__main__":
    # Before anything imports interpexec: which one, with bytecode caches.
    note = _util.setup_interpexec()
    from harness import cli

    sys.exit(cli.main(default_json_dir=_util.RESULTS, bytecode_note=note))
