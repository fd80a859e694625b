"""The Python API: a study from a spec (:class:`Study`), its one run path (start, run on a
backend, end), its result, and reading a study back (tables and plots).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch._imports import lazy_attributes

if TYPE_CHECKING:
    from hpsearch.study._result import StudyResult
    from hpsearch.study._study import Study

__all__ = ["Study", "StudyResult"]

__getattr__ = lazy_attributes(
    __name__,
    {
        "._result": ("StudyResult",),
        "._study": ("Study",),
    },
)
