"""``python -m calculator ...`` runs the CLI."""

import os
import sys

from .cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # NOTE: the reader stopped early (`... gpus | head -1`): not an error worth a traceback. Python's documented
    # recipe: point stdout at devnull so the flush at exit does not raise again, and exit 1 as Python does on EPIPE.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
sys.exit(code)
