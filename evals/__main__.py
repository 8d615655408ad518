"""``python -m evals`` (``make eval``): see ``evals/run.py``."""

import sys

from evals.run import main

sys.exit(main())
