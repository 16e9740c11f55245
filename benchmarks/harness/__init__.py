"""The comparison benchmark behind ``benchmarks/bench.py``: interpexec against
ProcessPoolExecutor, ThreadPoolExecutor and the stdlib InterpreterPoolExecutor.

    config.py   what is measured (Config, the executors, the steps)
    child.py    the measurements of one executor, in a fresh process
                (``python -P -m harness.child KIND CONFIG``)
    runner.py   runs the children, watches their progress, kills what they leave
    report.py   medians, targets, the tables and the plot
    cli.py      the command line and the run as a whole

config.py and child.py (and _tasks) import only built-in modules at the top: they
are all a child process imports, and its process pool's workers import them too.
"""
