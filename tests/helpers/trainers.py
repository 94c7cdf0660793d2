"""The tiny trainer's config and a trainer that records what TRL hands to the loss, shared by the trainer tests."""

import re

from trl_ada import AdaGRPOConfig, AdaGRPOTrainer


PROMPT_TAG = re.compile(r"q(\d+) r([\d.]+)")


def tiny_args(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path / "out"),
        num_generations=4,
        per_device_train_batch_size=16,
        max_completion_length=12,
        max_steps=2,
        learning_rate=1e-2,
        shuffle_dataset=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        disable_tqdm=True,
    )
    base.update(kwargs)
    return AdaGRPOConfig(**base)


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
