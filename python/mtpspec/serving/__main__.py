"""`python -m mtpspec.serving MODEL_DIR ...`: the same as `mtpspec-serve`."""

import sys

from . import main

sys.exit(main())
