"""``python -m tea_notebook`` is the ``tea`` command."""

import sys

from tea_notebook.cli import main

sys.exit(main())
