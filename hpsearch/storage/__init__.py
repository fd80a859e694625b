"""Optuna storages: opening a study's storage (journal file, SQLite, PostgreSQL, gRPC proxy)
and serving it to the workers. A room of its own below everything that keeps or reads a study,
so that the spec, the tracking and the surrogate benchmarks can name a storage without the
search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.storage._storage import (
        JOURNAL_PREFIX,
        ProxyAddress,
        StorageProxy,
        expand_env,
        journal_backend,
        open_storage,
        proxy_client,
        redact,
        study_known,
        sync_journals,
    )

__all__ = [
    "JOURNAL_PREFIX",
    "ProxyAddress",
    "StorageProxy",
    "expand_env",
    "journal_backend",
    "open_storage",
    "proxy_client",
    "redact",
    "study_known",
    "sync_journals",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._storage": (
            "JOURNAL_PREFIX",
            "ProxyAddress",
            "StorageProxy",
            "expand_env",
            "journal_backend",
            "open_storage",
            "proxy_client",
            "redact",
            "study_known",
            "sync_journals",
        ),
    },
)
