"""
The curriculum on TRL's asynchronous GRPO trainer (`trl.experimental.async_grpo`, TRL 1.16; docs/async.md): stage
schedules of G and temperature, per-prompt G with skipping, and DAPO-style dynamic sampling in the rollout worker.
Importing this module imports TRL's experimental package.
"""

from ._trl.async_trainer import CurriculumAsyncGRPOTrainer
from ._trl.async_server import vllm_server_unready
from ._trl.async_transfer import FileWeightTransfer
from ._trl.async_worker import CurriculumRolloutLoop

__all__ = ["CurriculumAsyncGRPOTrainer", "CurriculumRolloutLoop", "FileWeightTransfer", "vllm_server_unready"]
