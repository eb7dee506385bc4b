"""The command line that runs ``rdmascope`` in a child process (``rdmascope demo``'s server and
recorder): ``command() + ["record", ...]``.

``[sys.executable, "-m", "rdmascope"]`` looked the package up from the child's working
directory first: started from a folder holding a directory named ``rdmascope`` (a clone's parent,
say), the child imported that folder and died with ``ImportError``. ``command()`` runs the
interpreter that runs the parent, drops the working directory from the child's ``sys.path``
before anything is imported, and then checks that the package it imports is the parent's
(``rdmascope.__file__``), so that parent and child always run the same code.
"""

from __future__ import annotations

import os
import sys

#: Run in the child by ``python -c``: no cwd on sys.path, the parent's package, then the CLI.
_CODE = (
    "import sys\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
    "import rdmascope, os\n"
    "want = {want!r}\n"
    "if os.path.realpath(rdmascope.__file__) != want:\n"
    "    sys.exit('rdmascope child: imported ' + rdmascope.__file__ + ', not ' + want)\n"
    "from rdmascope.cli import main\n"
    "main(prog_name='rdmascope')\n"
)


def command() -> list[str]:
    """Return ``[python, "-c", code]``: append the subcommand and its arguments (``argv[1:]`` of
    the child's ``rdmascope``). The child exits 1 naming both files if it would import another
    copy of the package than the parent's."""
    import rdmascope

    return [sys.executable, "-c", _CODE.format(want=os.path.realpath(rdmascope.__file__))]
