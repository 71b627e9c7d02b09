"""``python -m jaxspreeze``: the same as the ``jaxspreeze`` command."""

import sys

from jaxspreeze.cli import main

sys.exit(main())
