"""grpo-curriculum: change GRPO's (and RLOO's) num_generations and temperature during a TRL run, safely."""

__version__ = "0.1.0"

from .compat import check_trl

check_trl()  # an unsupported TRL fails here, with one message naming the supported range (see `compat.py`)

from .core.adaptive import Adaptive
from .core.errors import CurriculumError, Problem
from .core.geometry import BatchGeometry
from .core.sampling import DynamicSampling
from .core.schedule import ResolvedSchedule, Setting, Stage, StageSchedule
from .core.skipping import Skip

__all__ = [
    "Adaptive",
    "BatchGeometry",
    "CurriculumCallback",
    "CurriculumError",
    "CurriculumGRPOTrainer",
    "CurriculumRLOOTrainer",
    "DynamicSampling",
    "Problem",
    "ResolvedSchedule",
    "Setting",
    "Skip",
    "Stage",
    "StageSchedule",
    "__version__",
]


def __getattr__(name):
    # The trainer and the callback import torch/transformers/trl; the pure pieces above do not.
    if name == "CurriculumCallback":
        from .training.callback import CurriculumCallback

        return CurriculumCallback
    if name == "CurriculumGRPOTrainer":
        from .training.trainer import CurriculumGRPOTrainer

        return CurriculumGRPOTrainer
    if name == "CurriculumRLOOTrainer":
        from .training.trainer import CurriculumRLOOTrainer

        return CurriculumRLOOTrainer
    raise AttributeError(f"module 'grpo_curriculum' has no attribute {name!r}")
