"""A small test kit: tiny objectives and specs that exercise the whole pipeline quickly.

The objectives live in an installed module so that Dask workers can import them by name
(``hpsearch.testing.objectives:quadratic``), exactly as they import a user's objective.
"""

from hpsearch.testing._specs import cnn_spec, user_spec

__all__ = ["cnn_spec", "user_spec"]
