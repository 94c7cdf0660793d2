"""trl-ada: Reinforce-Ada adaptive sampling for TRL's GRPOTrainer.

    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer

The two names load on first use (as TRL's own top level does), so that the pure algorithm, `trl_ada.core`, imports
without torch or TRL: `from trl_ada.core.sampling import run_adaptive_sampling` simulates the rounds anywhere.
"""

__version__ = "0.1.0"

__all__ = ["AdaGRPOConfig", "AdaGRPOTrainer", "__version__"]


def __getattr__(name: str):
    if name == "AdaGRPOConfig":
        from trl_ada.config import AdaGRPOConfig

        return AdaGRPOConfig
    if name == "AdaGRPOTrainer":
        from trl_ada.trainer import AdaGRPOTrainer

        return AdaGRPOTrainer
    raise AttributeError(f"module 'trl_ada' has no attribute {name!r}")
