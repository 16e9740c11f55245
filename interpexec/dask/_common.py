"""The constants and the exception that the modules of interpexec.dask share.

Imports nothing: the package's ``__init__`` loads it, including in worker
interpreters (which import the package to reach :mod:`._plan`).
"""

#: The executor name that :func:`dask.annotate` selects in the named mode.
EXECUTOR_NAME = "interpreters"

#: Dask config keys read by :func:`interpexec.dask.dask_setup` (``--preload interpexec.dask``).
CONFIG_EXECUTOR = "interpexec.executor"
CONFIG_MAX_WORKERS = "interpexec.max-workers"


class UnsupportedDistributedError(RuntimeError):
    """The installed ``distributed`` runs tasks in a way interpexec.dask does not
    know, so it refuses to install rather than run tasks wrongly."""
