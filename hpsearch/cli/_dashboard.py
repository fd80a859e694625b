"""Optuna's dashboard on a study's storage, for ``hpsearch ui`` (run as
``python -m hpsearch.cli._dashboard PORT`` with the storage URL in ``HPSEARCH_STORAGE``, so
that no password is on a command line): the storage opened as hpsearch opens it (a journal
file, a database), served on 127.0.0.1 until the process is stopped."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import os

    import optuna_dashboard

    from hpsearch.storage import open_storage

    (port,) = argv
    storage = open_storage(os.environ["HPSEARCH_STORAGE"])
    optuna_dashboard.run_server(storage, host="127.0.0.1", port=int(port))


if __name__ == "__main__":
    main(sys.argv[1:])
