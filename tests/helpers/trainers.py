"""The tiny trainer's config and a trainer that records what TRL hands to the loss, shared by the trainer tests."""

import re

from tests.helpers.data import make_recording_reward
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer


PROMPT_TAG = re.compile(r"q(\d+) r([\d.]+)")


# What every trainer test runs with: the CPU, no reports, checkpoints or progress bars, a log line per step, one seed.
OFFLINE = dict(use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, seed=0, disable_tqdm=True)
# The smallest rounds: groups of 4, 2 prompts a step on one process, completions of at most 8 tokens.
SMALL = dict(OFFLINE, num_generations=4, per_device_train_batch_size=8, max_completion_length=8)
# The tiny trainer's run: 4 prompts a step for 2 steps, a learning rate that moves the tiny model, the data in order.
TINY = dict(
    per_device_train_batch_size=16, max_completion_length=12, max_steps=2, learning_rate=1e-2, shuffle_dataset=False
)


def small_args(tmp_path, config=AdaGRPOConfig, **kwargs):
    """`config` (AdaGRPOConfig, or TRL's GRPOConfig to compare with) writing under tmp_path/out: SMALL, then `kwargs`."""
    return config(**{"output_dir": str(tmp_path / "out"), **SMALL, **kwargs})


def tiny_args(tmp_path, **kwargs):
    return small_args(tmp_path, **{**TINY, **kwargs})


def recording_trainer(model, dataset, args):
    """An AdaGRPOTrainer scoring with a fresh recording hash reward (`tests.helpers.data.make_recording_reward`)."""
    return AdaGRPOTrainer(model=model, reward_funcs=make_recording_reward(), train_dataset=dataset, args=args)


class Recorder(AdaGRPOTrainer):
    """Keeps every generation batch TRL hands to the loss (observation only, nothing replaced)."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.recorded = getattr(self, "recorded", []) + [(len(self.reward_log), output)]
        return output


def decode_groups(trainer, output):
    """Per group of num_generations rows: (prompt tag, pass rate, completion texts, advantages)."""
    tok = trainer.processing_class
    n = trainer.num_generations
    groups = []
    for g in range(0, output["completion_ids"].shape[0], n):
        prompt = tok.decode(output["prompt_ids"][g][output["prompt_mask"][g].bool()])
        tag, rate = PROMPT_TAG.search(prompt).groups()
        texts = [
            tok.decode(output["completion_ids"][i][output["completion_mask"][i].bool()], skip_special_tokens=True)
            for i in range(g, g + n)
        ]
        groups.append((f"q{tag} r{rate}", float(rate), texts, output["advantages"][g : g + n].tolist()))
    return groups
