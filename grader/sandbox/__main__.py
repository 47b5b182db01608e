"""``python -m grader.sandbox``: see :mod:`grader.sandbox.serve`."""
import sys

from grader.sandbox.serve import main

sys.exit(main())
