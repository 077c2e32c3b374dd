"""`python -m grpo_curriculum ...`: the `grpo-curriculum` command (as `python -m grpo_curriculum.cli`)."""

import sys

from .cli.main import main

sys.exit(main())
