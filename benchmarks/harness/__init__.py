"""The comparison benchmark behind ``benchmarks/bench.py``: interpexec against
ProcessPoolExecutor, ThreadPoolExecutor and the stdlib InterpreterPoolExecutor.

    config.py   what is measured (Config, the executors, the steps)
    child.py    the measurements of one executor, in a fresh process
                (``python -P -m harness.child KIND CONFIG``)
    runner.py   runs the children, watches their progress, kills what they leave
    report.py   medians, targets, the tables and the plot
    cli.py      the command line and the run as a whole

Every module imports only built-in modules at the top: child processes import
this package, and so do their process pools' workers.
"""
