"""A joblib parallel backend that runs batches in subinterpreters.

Importing this module registers the backend ``"interpexec"``::

    import joblib
    import interpexec.joblib

    with joblib.parallel_config(backend="interpexec", n_jobs=4):
        results = joblib.Parallel()(joblib.delayed(f)(x) for x in xs)

joblib's ``Parallel`` keeps doing what it does with loky (automatic batching,
``return_as="generator"``/``"generator_unordered"``, ``timeout``, progress
output); each batch runs in a worker of interpexec's process-wide pool
(:func:`interpexec.get_reusable_executor`, kept warm between calls).

How a batch travels: the backend takes the batch's ``(func, args, kwargs)``
triples out of joblib's ``BatchedCalls``, pickles them into one ``bytes``
(:mod:`interpexec.joblib._batch`; cloudpickle when installed, as loky), and the
worker calls them with :func:`run_batch`.  Nothing of joblib or loky is imported
in a worker: joblib cannot be (loky imports ``faulthandler``, which refuses
isolated subinterpreters on every supported Python).

Layout: workers import this package for :func:`run_batch`, so the backend class,
which needs joblib, is imported only in the main interpreter.
"""

from __future__ import annotations

from .. import _shared
from ._batch import run_batch

__all__ = ["BACKEND_NAME", "InterpreterBackend", "register", "run_batch"]

if not _shared.in_worker():  # joblib cannot be imported in a worker (see above)
    from ._backend import BACKEND_NAME, InterpreterBackend, register

    register()
