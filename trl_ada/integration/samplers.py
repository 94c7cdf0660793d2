"""The sampling strategies of a training step: one is chosen when the trainer is built (`choose_sampler`).

A strategy fills a step's bookkeeping (`StepSampling`: `results`, `chosen` and the refill counts) for a generation
batch of `target` prompts. It reaches the model only through two calls of the trainer:

- `trainer._sample_round(step, prompts, k)`: k samples for each of the prompts (or k[i] for the i-th), split evenly
  over the ranks, through GRPOTrainer's own rollout path; returns every reward, on every rank;
- `draw_refill(trainer, step, count)` (below): `count` new prompts from the training set (the same ones on every rank).

The rules themselves are pure and live in `trl_ada.core`; each strategy here wires one of them to those two calls.
"""

from __future__ import annotations

import functools

from trl_ada.core.budget import remembered_posterior, run_budgeted_sampling, step_budget, step_coin
from trl_ada.core.dynamic import fill_with_signal
from trl_ada.core.est import allocate, allocation_metrics
from trl_ada.core.sampling import PromptResult, run_adaptive_sampling
from trl_ada.integration.pipelined_rank import sample_pipelined
from trl_ada.integration.rollouts import StepSampling, _nanmean


def draw_refill(trainer, step: StepSampling, count: int) -> list[int]:
    """Draw `count` prompts from the trainer's refill stream (the same ones on every rank) into the step, as the
    dataloader's rows (the Trainer's column filter applied); return their numbers."""
    first = len(step.rows)
    rows = [dict(trainer.train_dataset[index]) for index in trainer._refill.draw(count)]
    step.rows += trainer._as_dataloader_rows(rows)
    step.prompt_ids += trainer._tokenize(step.rows[first:])
    step.pool_rewards_per_func += [[] for _ in range(count)]
    return list(range(first, len(step.rows)))


class Rounds:
    """Reinforce-Ada's rounds (`trl_ada.core.sampling`), with DAPO's dynamic sampling on top when it is on
    (`trl_ada.core.dynamic`: drop the prompts without signal, sample refills in their place). With adaptive sampling
    off, one round of num_generations per prompt: GRPO's group.

    `pipelined_rounds` is read at each batch, not fixed here: the rounds then run barrier-free on this rank's
    colocated engine (`trl_ada.integration.pipelined_rank`), with the same results as the synchronous rounds.
    """

    def __init__(self, trainer):
        self.trainer = trainer

    def sample(self, step: StepSampling, target: int) -> None:
        args = self.trainer.args
        filled = fill_with_signal(
            first=list(range(target)),
            draw=functools.partial(draw_refill, self.trainer, step),
            sample=functools.partial(self.sample_prompts, step),
            target=target,
            max_refill_batches=args.max_refill_batches if args.dynamic_sampling else 0,
            atol=args.dynamic_sampling_tolerance,
        )
        step.chosen = [filled.sampled[i][0] for i in filled.chosen]
        step.refill_batches, step.without_signal = filled.refill_batches, filled.without_signal

    def sample_prompts(self, step: StepSampling, prompts: list[int]) -> list[PromptResult]:
        """Sample one batch of prompts (the first, or a refill) to the end of their rounds."""
        trainer, args = self.trainer, self.trainer.args
        adaptive = args.multiround_adaptive_downsampling
        batch, step.batches, step.round_index = step.batches, step.batches + 1, 0
        seed = args.seed + trainer.state.global_step + 7919 * batch
        if args.pipelined_rounds:
            results = sample_pipelined(trainer, step, prompts, seed)
        else:
            results = run_adaptive_sampling(
                num_prompts=len(prompts),
                sample_round=lambda active, k: trainer._sample_round(step, [prompts[i] for i in active], k),
                num_generations=trainer.num_generations,
                round_repeat=args.round_repeat if adaptive else trainer.num_generations,  # one round of n: GRPO
                max_rounds=args.max_rounds if adaptive else 1,
                choice=args.reinforce_ada_choice,
                positive_threshold=args.positive_threshold,
                selection=args.pool_selection if adaptive else "earliest",
                seed=seed,
            )
        first = len(step.results)
        step.results.update(zip(prompts, results))
        assert len(step.results) == first + len(prompts), "a prompt was sampled twice in one step"
        return results


class Budget:
    """Budgeted sampling (`trl_ada.core.budget`): screen with the prompt memory, n samples each, top-ups within the
    cap of `sampling_budget` completions per trained prompt."""

    def __init__(self, trainer):
        self.trainer = trainer

    def sample(self, step: StepSampling, target: int) -> None:
        trainer, args = self.trainer, self.trainer.args
        memory, column = trainer.prompt_memory, args.prompt_memory_group_column
        keys: dict[int, int] = {}

        def key(prompt: int) -> int:
            if prompt not in keys:
                keys[prompt] = trainer._prompt_key(step, prompt)
            return keys[prompt]

        posterior = remembered_posterior(args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta, memory,
                                         trainer.group_prior)
        budgeted = run_budgeted_sampling(
            first=list(range(target)),
            draw=functools.partial(draw_refill, trainer, step),
            predict=lambda prompt: posterior(key(prompt), step.rows[prompt][column] if column is not None else None),
            coin=lambda prompt: step_coin(args.seed, trainer.state.global_step, key(prompt), prompt),
            sample_round=functools.partial(trainer._sample_round, step),
            target=target,
            budget=step_budget(args.sampling_budget, target),
            num_generations=trainer.num_generations,
            top_up=args.budget_top_up,
            skip_threshold=args.budget_skip_threshold,
            explore_floor=args.budget_explore_floor,
            max_candidate_batches=args.max_refill_batches,
            positive_threshold=args.positive_threshold,
            world_size=trainer.accelerator.num_processes,
        )
        if memory is not None:
            memory.forget([key(prompt) for prompt in budgeted.skipped], args.budget_skip_decay)
        step.results = dict(budgeted.sampled)
        step.chosen = [prompt for prompt, _ in budgeted.sampled]
        step.skipped, step.refill_batches = len(budgeted.skipped), budgeted.candidate_batches
        step.top_up_rounds = budgeted.top_up_rounds


class Est:
    """Reinforce-Ada-Est (`trl_ada.core.est`): allocate N_x per prompt from the remembered pass rates, sample them
    all in one round and keep every sample.

    Each rank's prompts share its generation batch (num_generations each on average), so every rank hands TRL
    exactly the rows GRPOTrainer would; the one round then splits over the ranks along the same boundaries.
    """

    def __init__(self, trainer):
        self.trainer = trainer

    def sample(self, step: StepSampling, target: int) -> None:
        trainer, args = self.trainer, self.trainer.args
        n, world, column = trainer.num_generations, trainer.accelerator.num_processes, args.prompt_memory_group_column
        posterior = remembered_posterior(args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta,
                                         trainer.prompt_memory, trainer.group_prior)
        pass_rates = []
        for prompt in range(target):  # from before this step: the memory takes this step's samples afterwards
            a, b, _ = posterior(trainer._prompt_key(step, prompt), step.rows[prompt][column] if column else None)
            pass_rates.append(a / (a + b))
        per_rank = target // world
        counts = [
            count
            for rank in range(world)
            for count in allocate(pass_rates[rank * per_rank : (rank + 1) * per_rank], n * per_rank,
                                  exponent=args.est_exponent, eps=args.est_epsilon, min_samples=args.est_min_samples,
                                  max_samples=args.est_max_samples)
        ]
        step.batches, step.round_index = 1, 0
        pools = trainer._sample_round(step, list(range(target)), counts)
        step.results = {
            prompt: PromptResult(pool_rewards=pool, selected=list(range(len(pool))), rounds=1, finished=True)
            for prompt, pool in enumerate(pools)
        }
        step.chosen = list(range(target))
        means = [_nanmean(pool) for pool in pools]
        step.est_metrics = allocation_metrics(pass_rates, counts, means)
        # Round one is every sample here, N_x per prompt: weigh prompts equally, as GRPO's n per prompt does.
        step.est_metrics["sampling/iid_reward"] = _nanmean(means)


def choose_sampler(trainer) -> Rounds | Budget | Est:
    """The strategy the trainer's config asks for (`AdaGRPOConfig` refuses the combinations that conflict)."""
    if trainer.args.reinforce_ada_est:
        return Est(trainer)
    if trainer.args.sampling_budget is not None:
        return Budget(trainer)
    return Rounds(trainer)
