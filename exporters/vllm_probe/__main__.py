"""`python -m vllm_probe`: the same command as `vllm-probe`."""

import sys

from .cli import main

sys.exit(main())
