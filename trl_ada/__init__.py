"""trl-ada: Reinforce-Ada adaptive sampling for TRL's GRPOTrainer.

    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
"""

__version__ = "0.1.0"

from trl_ada.config import AdaGRPOConfig  # noqa: E402
from trl_ada.trainer import AdaGRPOTrainer  # noqa: E402

__all__ = ["AdaGRPOConfig", "AdaGRPOTrainer", "__version__"]
