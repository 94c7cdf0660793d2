"""The prompt memory's key of a training row, and folding a step's samples into the memory and the group prior."""

from __future__ import annotations

from typing import Any

from trl_ada.core.memory import GroupPrior, PromptMemory, image_slots, observe_step, prompt_key, prompt_text
from trl_ada.core.sampling import count_signs
from trl_ada.integration.rollouts import StepSampling


def row_key(row: dict[str, Any], prompt_ids: list[int], with_environment: bool) -> int:
    """A row's key: its token ids, its images, where its messages place them, and (with environments) the row its
    environment is reset with. Rows without placeholders in their messages keep the keys they always had."""
    images = row.get("images") or ([row["image"]] if row.get("image") is not None else None)
    context = None
    if with_environment:
        context = {column: value for column, value in row.items() if column not in ("prompt", "image", "images")}
    slots = image_slots(row.get("prompt"))
    if slots:  # "<image> Describe." and "Describe. <image>" are two prompts
        context = {**(context or {}), "image_slots": slots}
    return prompt_key(prompt_ids, images=images, context=context)


def observe(
    step: StepSampling,
    keys: list[int],
    memory: PromptMemory | None,
    group_prior: GroupPrior | None,
    group_column: str | None,
    threshold: float,
    num_generations: int,
    global_step: int,
) -> dict[str, float]:
    """Fold every scored completion of the step into the memory and the group prior; return their metrics.

    `keys`: the memory key of each sampled prompt, in `step.results` order. Only scorable completions are trials (an
    unscorable one, NaN reward, is neither a success nor a failure)."""
    metrics: dict[str, float] = {}
    n = num_generations
    if group_prior is not None:
        # Only the first n samples of each pool: drawn before any sampling rule saw a reward, so unbiased. A visit
        # with fewer than two scorable ones among them tells nothing of the spread: left out.
        visits = [
            (step.rows[p][group_column], *count_signs(r.pool_rewards[:n], threshold)) for p, r in step.results.items()
        ]
        visits = [(label, pos + neg, pos) for label, pos, neg in visits if pos + neg >= 2]
        group_prior.update(
            [label for label, _, _ in visits], [trials for _, trials, _ in visits], [pos for _, _, pos in visits]
        )
        metrics["sampling/groups_known"] = float(sum(s is not None for s in group_prior.table()["strength"]))
    if memory is None:
        return metrics
    signs = [count_signs(r.pool_rewards, threshold) for r in step.results.values()]
    return metrics | observe_step(
        memory, keys, [pos + neg for pos, neg in signs], [pos for pos, _ in signs], step=global_step
    )


def memory_texts(dataset, tokenize, with_environment: bool) -> dict[str, str]:
    """Each training row's text by its memory key (hex), for the memory export: the last message of the row with
    that key (none for a dataset that is not a map-style `datasets.Dataset`). `tokenize(rows)` is the trainer's; the
    set is tokenized 1024 rows at a time."""
    from datasets import Dataset

    if not isinstance(dataset, Dataset):
        return {}
    texts: dict[str, str] = {}
    for start in range(0, len(dataset), 1024):
        rows = list(dataset.select(range(start, min(start + 1024, len(dataset)))))
        for row, ids in zip(rows, tokenize(rows)):
            texts.setdefault(f"{row_key(row, ids, with_environment):016x}", prompt_text(row.get("prompt", "")))
    return texts
