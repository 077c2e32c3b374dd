"""`python -m grpo_curriculum ...` (also `accelerate launch -m grpo_curriculum ...`, `torchrun ... -m grpo_curriculum
...`): the `grpo-curriculum` command."""

import sys

from .cli.main import main

sys.exit(main())
