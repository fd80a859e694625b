"""``python -m hpsearch.cli``: the ``hpsearch`` command."""

from hpsearch.cli import main

main()
