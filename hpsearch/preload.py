"""The Dask worker preload of hpsearch: ``dask worker ... --preload hpsearch.preload``.

It imports what trials need before the first trial arrives, and makes a worker end its trials
cleanly when its batch job ends. The work is done in :mod:`hpsearch.worker`; this module is the
name Dask is given, kept as it always was.
"""

from __future__ import annotations

from hpsearch.worker import dask_setup

__all__ = ["dask_setup"]
