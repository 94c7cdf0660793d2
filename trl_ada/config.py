"""`AdaGRPOConfig`: `GRPOConfig` plus the knobs of Reinforce-Ada's adaptive sampling."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass, field

from trl import GRPOConfig

from trl_ada.core.advantages import BASELINES
from trl_ada.core.sampling import SELECTIONS, normalize_choice
from trl_ada.samplers import BUILT_IN, built_in_name, check_sampler, import_path, sampler_class, sampler_name
from trl_ada.samplers.protocol import check_one_of, check_range


PAPER = {  # what TRL's model card cites for a trainer trained with these defaults
    "title": "Reinforce-Ada: An Adaptive Sampling Framework under Non-linear RL Objectives",
    "id": "2510.04996",
    "citation": (
        "@article{xiong2025reinforceada,\n"
        "    title        = {{Reinforce-Ada: An Adaptive Sampling Framework under Non-linear RL Objectives}},\n"
        "    author       = {Wei Xiong and Chenlu Ye and Baohao Liao and Hanze Dong and Xinxing Xu and Christof Monz "
        "and Jiang Bian and Nan Jiang and Tong Zhang},\n"
        "    year         = 2025,\n"
        "    eprint       = {arXiv:2510.04996},\n"
        "}"
    ),
}

ADVANTAGE_ESTIMATORS = ("reinforce_ada", "grpo", "reinforce_rej", "raft", "est", "maxrl")


@dataclass
class AdaGRPOConfig(GRPOConfig):
    r"""
    Configuration for [`AdaGRPOTrainer`]: every field of TRL's `GRPOConfig`, plus Reinforce-Ada's adaptive sampling
    (Xiong et al., arXiv:2510.04996).

    The defaults reproduce the authors' reference implementation: rounds of `round_repeat=8` samples per active
    prompt, at most `max_rounds=4` rounds, a prompt retires once it holds floor(n/2) positives and n - floor(n/2)
    negatives ("balanced"), positives are rewards strictly above `positive_threshold=0.7`, and advantages are
    `r - (fraction of positives in the prompt's whole pool)`, without std scaling.

    Inherited `GRPOConfig` fields keep TRL's defaults; the recipes in `recipes/` carry the paper's values (n=4,
    clip 0.2/0.28, no KL, lr 1e-6, ...). Set `num_generations` (n, the kept group size) explicitly: TRL's default
    of 8 is twice the paper's. Every field's full help is in `docs/knobs.md` (generated from the fields).

    Parameters:
        > The sampler (the allocation rule)

        sampler (`str` or `None`, *optional*, defaults to `None`):
            `"reinforce_ada"` (the rounds), `"grpo"` (sampling off), `"dapo"`, `"budget"`, `"est"`, `"knapsack"`,
            `"retire_solved"`, or an import path `module.Class` (docs/samplers.md); `None` maps the fields below onto a
            name.
        sampler_kwargs (`dict` or `None`, *optional*, defaults to `None`):
            Keyword arguments of the sampler's constructor (a dict, or its JSON on the command line).

        > Rounds and exit rule (the reference's defaults)

        multiround_adaptive_downsampling (`bool` or `None`, *optional*, defaults to `None`):
            Deprecated (`sampler="grpo"` instead of `False`). Sample in rounds; `False` is GRPO's plain sampling.
        reinforce_ada_choice (`str`, *optional*, defaults to `"balanced"`):
            Exit rule: `"balanced"` (floor(n/2) positives and the rest negatives in the pool) or `"positive_focused"`
            (one positive).
        positive_threshold (`float`, *optional*, defaults to `0.7`):
            A sample is positive iff its reward is strictly greater.
        positive_reward_func (`str` or `None`, *optional*, defaults to `None`):
            The reward function (by its name in `reward_func_names`) whose own reward decides a positive; `None`: the
            weighted sum, which must then come from a single reward function wherever positives are read
            (`"weighted_sum"`: the sum of several).
        max_rounds (`int`, *optional*, defaults to `4`):
            Rounds at most; a prompt that never meets its exit rule keeps a fallback group.
        round_repeat (`int` or `None`, *optional*, defaults to `None`):
            Samples per active prompt per round (at least `num_generations`); `None`: max(8, `num_generations`).

        > Advantages

        global_stat_est (`bool`, *optional*, defaults to `True`):
            Baseline from the prompt's whole pool; `False` (the verl name) is `advantage_estimator="grpo"`.
        pool_std_scaling (`bool`, *optional*, defaults to `False`):
            Divide pooled advantages by the pool's standard deviation (a deviation from the reference).
        advantage_estimator (`str` or `None`, *optional*, defaults to `None`):
            `"reinforce_ada"`, `"grpo"`, `"reinforce_rej"`, `"raft"`, `"est"` or `"maxrl"`; `None` picks the sampler's
            own.
        pool_baseline (`str` or `None`, *optional*, defaults to `None`):
            The pooled baseline: the share of positives (`"threshold_fraction"`, the reference) or `"mean_reward"`
            (for shaped rewards); `None`: `"mean_reward"` with `positive_reward_func` naming a function, else the
            reference's.
        pool_selection (`str`, *optional*, defaults to `"earliest"`):
            Which pool samples form the kept group: the earliest (reference) or a seeded `"random"` subset.

        > Barrier-free rounds on a colocated vLLM engine

        pipelined_rounds (`bool`, *optional*, defaults to `False`):
            Each prompt starts its next round as soon as its own samples are scored; the same groups.
        pipelined_speculation (`bool`, *optional*, defaults to `False`):
            With `pipelined_rounds`: idle engine slots run a prompt's likely next round ahead of time.

        > Reinforce-Ada-Est

        reinforce_ada_est (`bool`, *optional*, defaults to `False`):
            Deprecated (`sampler="est"`). Est: N_x samples per prompt from its remembered pass rate, one call.
        est_exponent (`float`, *optional*, defaults to `0.5`):
            N_x proportional to (p + eps)^-exponent.
        est_min_samples (`int`, *optional*, defaults to `2`):
            Smallest N_x.
        est_max_samples (`int` or `None`, *optional*, defaults to `None`):
            Largest N_x (`None`: no cap).
        est_epsilon (`float`, *optional*, defaults to `1e-6`):
            The eps of the allocation and of the advantage's weight.

        > DAPO dynamic sampling

        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            Drop prompts whose kept group has no signal and sample others from the training set in their place.
        max_refill_batches (`int`, *optional*, defaults to `10`):
            Extra generation batches per step at most.
        dynamic_sampling_tolerance (`float`, *optional*, defaults to `1e-6`):
            A group whose rewards all lie within this distance has no signal.

        > Prompt memory

        prompt_memory (`bool` or `None`, *optional*, defaults to `None`):
            Remember each prompt's pass rate across steps (decayed Beta counts, saved in checkpoints); `None`: on
            for a sampler that reads it.
        prompt_memory_decay (`float` or `None`, *optional*, defaults to `None`):
            Factor on a prompt's old counts at each visit (`None`: 0.5, or 0.9 with Est).
        prompt_memory_prior_alpha (`float` or `None`, *optional*, defaults to `None`):
            Beta prior pseudo-count of positives (`None`: 1.0).
        prompt_memory_prior_beta (`float` or `None`, *optional*, defaults to `None`):
            Beta prior pseudo-count of negatives (`None`: 1.0, or 16.0 with Est).
        prompt_memory_group_column (`str` or `None`, *optional*, defaults to `None`):
            A dataset column grouping prompts; an unseen prompt starts from its group's fitted pass rates.

        > Budgeted adaptive sampling

        sampling_budget (`float` or `None`, *optional*, defaults to `None`):
            Completions generated per trained prompt per step, a hard cap (`4.0` with n=4 is GRPO parity).
        budget_top_up (`int`, *optional*, defaults to `2`):
            Samples per prompt per top-up round.
        budget_skip_threshold (`float`, *optional*, defaults to `0.5`):
            Skip a remembered prompt whose predicted chance of a uniform group exceeds this.
        budget_skip_decay (`float`, *optional*, defaults to `0.9`):
            A skipped prompt's remembered counts are multiplied by this.
        budget_explore_floor (`float`, *optional*, defaults to `0.05`):
            A prompt that would be skipped is sampled anyway with this probability.

    Example:

    ```python
    >>> from trl_ada import AdaGRPOConfig
    >>> args = AdaGRPOConfig(output_dir="out", num_generations=4, per_device_train_batch_size=8,
    ...                      reinforce_ada_choice="positive-focused", use_cpu=True, report_to="none")
    >>> args.reinforce_ada_choice, args.round_repeat, args.advantage_estimator
    ('positive_focused', 8, 'reinforce_ada')

    ```
    """

    sampler: str | None = field(
        default=None,
        metadata={
            "help": "The allocation rule, one of "
            "'reinforce_ada' (Reinforce-Ada's rounds), 'grpo' (GRPO's sampling: one round of num_generations), "
            "'dapo' (GRPO with DAPO's dynamic sampling), 'budget' (budgeted sampling, sampling_budget completions per "
            "trained prompt), 'est' (Reinforce-Ada-Est), 'knapsack' (Knapsack RL's allocation), 'retire_solved' "
            "(ScaleRL's No-Positive-Resampling: GRPO, a prompt a visit shows solved retired for good), or an import "
            "path 'module.Class' to your own sampler (trl_ada.samplers.protocol; importable from the current folder), or from "
            "Python the class itself or an instance of it. None "
            "(the default) is 'reinforce_ada', or what an older switch selects, with a FutureWarning (they will be "
            "removed): reinforce_ada_est=True is 'est', sampling_budget set is 'budget', "
            "multiround_adaptive_downsampling=False is 'grpo' (or 'dapo' with dynamic_sampling=True)."
        },
    )
    sampler_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments of the sampler's constructor, e.g. {'min_samples': 2, 'max_samples': 32} for "
            "'knapsack' (a JSON string on the command line)."
        },
    )
    multiround_adaptive_downsampling: bool | None = field(
        default=None,
        metadata={
            "help": "Deprecated: set sampler='grpo' instead of False. True: sample in rounds with successive "
            "elimination (every sampler but 'grpo' and 'dapo' does); False: GRPO's plain sampling of "
            "`num_generations` per prompt. None (the default): as the sampler does; read back as True or False."
        },
    )
    reinforce_ada_choice: str = field(
        default="balanced",
        metadata={
            "help": "Exit rule. 'balanced': a prompt retires once its pool holds floor(n/2) positives and "
            "n - floor(n/2) negatives. 'positive_focused' (also spelled 'positive-focused'): once it holds one "
            "positive.",
            "choices": ["balanced", "positive_focused", "positive-focused"],
        },
    )
    positive_threshold: float = field(
        default=0.7,
        metadata={"help": "A sample is positive iff its reward is strictly greater than this value."},
    )
    positive_reward_func: str | None = field(
        default=None,
        metadata={
            "help": "What decides that a sample is positive (solved) for the exit rule, the selection, the prompt "
            "memory and every sampler that reads it: the name of one reward function, as TRL names them in "
            "`reward_func_names` (a function's __name__, a reward model's name), whose own unweighted reward must "
            "exceed positive_threshold; e.g. 'accuracy_reward' next to format rewards. None (the default): the "
            "weighted sum of the rewards (the reference, with its single reward). With several reward functions a "
            "sum can pass the threshold on format alone, so None is refused there wherever positives are read. The "
            "advantages keep using the weighted sum TRL trains on. 'weighted_sum': the sum decides, also of several "
            "reward functions (when only a solved sample can pass positive_threshold)."
        },
    )
    max_rounds: int = field(
        default=4,
        metadata={"help": "Maximum sampling rounds per step; at most max_rounds * round_repeat samples per prompt."},
    )
    round_repeat: int | None = field(
        default=None,
        metadata={
            "help": "Fresh samples drawn for each still-active prompt in each round. Must be >= num_generations. "
            "None (the default): max(8, num_generations), the reference's 8 wherever it can fill a group."
        },
    )
    global_stat_est: bool = field(
        default=True,
        metadata={
            "help": "The reference's switch of the baseline: from the prompt's whole sampled pool (True, the "
            "reference) or from the num_generations kept samples with TRL's GRPO statistics (False, which sets "
            "advantage_estimator='grpo')."
        },
    )
    pool_std_scaling: bool = field(
        default=False,
        metadata={
            "help": "Divide the pooled advantage by the pool's std (max(std, 1e-6) + 1e-6). The reference script "
            "and the paper do not."
        },
    )
    advantage_estimator: str | None = field(
        default=None,
        metadata={
            "help": "'reinforce_ada' (pooled statistics), 'grpo' (TRL's group statistics over the kept samples, "
            "following `scale_rewards`), 'reinforce_rej' (raw reward for mixed groups, 0 for uniform ones) or 'raft' "
            "(max(r, 0)) or 'est' (Reinforce-Ada-Est's residual-weighted advantage over all of a prompt's samples; "
            "only with sampler='est') or 'maxrl' (MaxRL's (r - mean) / mean, the mean over the prompt's pool, or "
            "its group with sampling off; 0 where the mean is 0 or below). Default: the sampler's own: 'est' with "
            "'est', 'reinforce_ada' with 'reinforce_ada' and 'budget', 'grpo' with any other (so that sampler='grpo' "
            "is exactly GRPOTrainer). Or an "
            "import path 'module.function' to your own: function(pool_rewards, selected, positive_threshold) returns "
            "one advantage per kept sample (docs/samplers.md)."
        },
    )
    pool_baseline: str | None = field(
        default=None,
        metadata={
            "help": "Pooled baseline. 'threshold_fraction' (the reference): fraction of the pool's positives. "
            "'mean_reward' (deviation, for shaped non-binary rewards): the pool's mean reward (the weighted sum TRL "
            "trains on). None (the default): 'mean_reward' with positive_reward_func naming a function (the trained "
            "reward is then a sum that a share of positives does not centre), else 'threshold_fraction'.",
            "choices": list(BASELINES),
        },
    )
    pool_selection: str = field(
        default="earliest",
        metadata={
            "help": "Which positives/negatives of the pool are kept: 'earliest' generated (the reference) or "
            "'random' (deviation, seeded by `seed`, the step and the prompt: independent of the order prompts retire).",
            "choices": list(SELECTIONS),
        },
    )
    pipelined_rounds: bool = field(
        default=False,
        metadata={
            "help": "Barrier-free rounds (vLLM colocate only): each prompt moves to its next round as soon as its own "
            "samples are scored, instead of every round waiting for the slowest completion of the batch. One "
            "request per sample on the colocated engine, the same results as the synchronous rounds "
            "(trl_ada/core/pipelined.py); each process pipelines its own share of the prompts and the results are "
            "gathered once per batch. A balanced prompt's next round starts as soon as its exit has become "
            "unreachable (no wasted sample)."
        },
    )
    pipelined_speculation: bool = field(
        default=False,
        metadata={
            "help": "With pipelined_rounds: engine slots that no certain round can use take a prompt's next round "
            "before it is known to happen (one round ahead at most). Its samples join the pool only if the round "
            "happens; otherwise they are aborted or discarded and logged as sampling/pipelined/wasted_samples and "
            "wasted_tokens. Pays where an engine step costs the same with more sequences running (a GPU below "
            "saturation); costs tokens for nothing where it does not (a CPU)."
        },
    )

    reinforce_ada_est: bool = field(
        default=False,
        metadata={
            "help": "Deprecated: set sampler='est' instead. Reinforce-Ada-Est (the paper's v3, Algorithm 1) instead of"
            " the rounds: each prompt's number of samples N_x is allocated up front from its remembered pass rate p_x "
            "(the prompt memory, turned on), proportional to (p_x + est_epsilon) ** -est_exponent within "
            "[est_min_samples, est_max_samples], num_generations per prompt on average (the generation batch GRPO "
            "makes); one generation call; every sample is trained on with advantage (r - mean_x) * (mean_x + "
            "est_epsilon) ** -(1 - est_exponent), mean_x the mean reward of the prompt's N_x samples "
            "(trl_ada/core/est.py). Rewards are read as pass rates, in [0, 1]: others are warned of (a mean at or "
            "below 0 would get the weight est_epsilon ** -(1 - est_exponent))."
        },
    )
    est_exponent: float = field(
        default=0.5,
        metadata={
            "help": "With sampler='est': N_x is proportional to (p_x + est_epsilon) ** -est_exponent and the "
            "advantage carries the residual weight (mean_x + est_epsilon) ** -(1 - est_exponent), so each prompt's "
            "total weight is 1/p. 0.5: the paper's hybrid (its Est); 1.0: the paper's implicit arm and the authors' "
            "code (no residual weight); 0.0: uniform allocation, explicit weight only."
        },
    )
    est_min_samples: int = field(
        default=2,
        metadata={
            "help": "With sampler='est': fewest samples a prompt gets (>= 2: one sample has no baseline, so no "
            "advantage; <= num_generations, the average, so that every prompt can have it)."
        },
    )
    est_max_samples: int | None = field(
        default=None,
        metadata={
            "help": "With sampler='est': most samples a prompt gets (>= num_generations). None (the default): no "
            "cap, as in the authors' code."
        },
    )
    est_epsilon: float = field(
        default=1e-6,
        metadata={
            "help": "With sampler='est': added to p_x in the allocation and to mean_x in the residual weight "
            "(the authors clamp p at 1e-6)."
        },
    )

    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop prompts whose kept group has no learning signal (all rewards equal "
            "within dynamic_sampling_tolerance) and sample prompts drawn from the training set in their place, until "
            "the step has its full number of groups with signal or max_refill_batches is reached (then it trains on "
            "what there is). sampler='dapo' is DAPO exactly; with sampler='reinforce_ada' the rounds come first."
        },
    )
    max_refill_batches: int = field(
        default=10,
        metadata={
            "help": "With dynamic_sampling: extra generation batches at most per step (DAPO's max_num_gen_batches). "
            "Each is sized to close the remaining gap, at most one generation batch of prompts. With sampling_budget: "
            "refill candidates to screen at most per step, in batches of one generation batch of prompts (drawn one "
            "by one, so a candidate the step does not reach stays in the stream). With sampler='retire_solved': "
            "batches of candidates drawn at most per step to replace retired prompts."
        },
    )
    dynamic_sampling_tolerance: float = field(
        default=1e-6,
        metadata={"help": "With dynamic_sampling: a group whose rewards all lie within this distance has no signal."},
    )
    prompt_memory: bool | None = field(
        default=None,
        metadata={
            "help": "Remember each prompt's pass rate across steps: a Beta posterior from decayed counts of every "
            "scored completion ('Ada-EMA'), keyed by a content hash of the prompt, saved in every checkpoint and "
            "exported to <output_dir>/prompt_memory.parquet at the end of training. None (the default): on for a "
            "sampler that reads it ('est', 'knapsack', one of yours with uses_prompt_memory), off otherwise; False "
            "with such a sampler is refused. Read back as True or False."
        },
    )
    prompt_memory_decay: float | None = field(
        default=None,
        metadata={
            "help": "Each visit multiplies a prompt's old counts by this factor in (0, 1] before adding the new "
            "samples: 0.5 gives the last visit about half of the weight; 1.0 never forgets. None (the default): 0.5, "
            "or 0.9 with sampler='est' (the authors' Ada-EMA)."
        },
    )
    prompt_memory_prior_alpha: float | None = field(
        default=None,
        metadata={
            "help": "Beta prior pseudo-count of successes. None (the default): 1.0 (with beta 1.0: the uniform "
            "prior; with sampler='est', beta 16.0: the authors' Ada-EMA prior)."
        },
    )
    prompt_memory_prior_beta: float | None = field(
        default=None,
        metadata={
            "help": "Beta prior pseudo-count of failures. None (the default): 1.0, or 16.0 with sampler='est' "
            "(the authors' Ada-EMA prior: an unseen prompt is presumed hard, pass rate 1/17)."
        },
    )

    sampling_budget: float | None = field(
        default=None,
        metadata={
            "help": "Budgeted adaptive sampling: the average number of completions generated per trained prompt per "
            "step (4.0 with num_generations=4 is GRPO parity). A step then never generates more than "
            "sampling_budget * prompts per step completions in all, padding included: remembered prompts predicted to "
            "come back uniform are skipped before any rollout and replaced from the training set, every trained "
            "prompt gets num_generations samples, and what is left buys top-ups for groups that came back uniform "
            "(trl_ada/core/budget.py); the kept group follows the reference's rule at exit (floor(n/2) positives "
            "first, the earliest samples), so the rounds' own fields (reinforce_ada_choice, round_repeat, max_rounds, "
            "pool_selection) do not apply. Needs >= num_generations; without prompt_memory=True nothing is skipped. "
            "None (the default): num_generations under sampler='budget'; set without a sampler it selects 'budget' "
            "(deprecated: name the sampler)."
        },
    )
    budget_top_up: int = field(
        default=2,
        metadata={"help": "With sampling_budget: samples per prompt per top-up round."},
    )
    budget_skip_threshold: float = field(
        default=0.5,
        metadata={
            "help": "With sampling_budget and prompt_memory (or prompt_memory_group_column): skip a prompt when the "
            "predicted chance that its num_generations samples all agree exceeds this."
        },
    )
    budget_skip_decay: float = field(
        default=0.9,
        metadata={
            "help": "With sampling_budget and prompt_memory: each time a remembered prompt is skipped, its counts are "
            "multiplied by this factor (information ages even when a prompt is not sampled), so a prompt skipped "
            "for a while is sampled again and a prompt the policy starts to solve is not starved. 1.0: never."
        },
    )
    prompt_memory_group_column: str | None = field(
        default=None,
        metadata={
            "help": "With a sampler that reads the prompt memory ('budget', 'est', 'knapsack', or your own): a dataset"
            " column that groups prompts (a problem kind, a source, a difficulty level). The pass rates seen in each "
            "group are fitted as a Beta distribution (trl_ada.core.memory.GroupPrior) and used as the prior of every "
            "prompt of the group, so a prompt never seen before is screened (budget) or allocated (Est) by what its "
            "group's prompts did. Worth it when a run rarely meets a prompt twice. None (the default): every prompt "
            "starts from the flat prior."
        },
    )
    budget_explore_floor: float = field(
        default=0.05,
        metadata={
            "help": "With sampling_budget: a prompt that would be skipped is sampled anyway with this probability, "
            "so no prompt is starved forever."
        },
    )

    # TRL parses these from their JSON (as on the command line) in TrainingArguments.__post_init__.
    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["sampler_kwargs"]

    def __post_init__(self):
        as_set = {name: getattr(self, name) for name in _DEFAULTS}  # as the user set them, before any is resolved
        try:  # TRL's checks first: they derive steps_per_generation and generation_batch_size, which ours use
            super().__post_init__()
        except json.JSONDecodeError as error:  # TRL's JSON error does not say which field holds the bad JSON
            bad = [f for f in self._VALID_DICT_FIELDS if isinstance(v := getattr(self, f), str) and v.startswith("{")]
            if not bad:
                raise
            raise ValueError(f"{bad[0]}={getattr(self, bad[0])!r} is not JSON: {error}.") from None
        if not isinstance(self.sampler_kwargs, dict | None):
            raise ValueError(f"sampler_kwargs={self.sampler_kwargs!r} must be a dict (or its JSON), or None.")
        for name in _OWN_BOOLS + ("multiround_adaptive_downsampling", "prompt_memory"):  # "false" reads as True
            value = getattr(self, name)
            if not (isinstance(value, bool) or (value is None and _DEFAULTS[name] is None)):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False (a bool, not a string).")
        self.reinforce_ada_choice = normalize_choice(str(self.reinforce_ada_choice))
        self.round_repeat = max(8, self.num_generations) if self.round_repeat is None else self.round_repeat
        self._select_sampler()
        # the authors' Ada-EMA for Est (docs/knobs.md says why), a flat prior otherwise
        est = self.sampler_name == "est"
        for name, default, high in (
            ("prompt_memory_decay", 0.9 if est else 0.5, 1),
            ("prompt_memory_prior_alpha", 1.0, math.inf),
            ("prompt_memory_prior_beta", 16.0 if est else 1.0, math.inf),
        ):
            setattr(self, name, default if getattr(self, name) is None else getattr(self, name))
            check_range(self, name, 0, high, above=True, fix=f" (default {default})")
        check_range(self, "positive_threshold", fix=" (the reference uses 0.7 for 0/1 rewards)")

        if not self.global_stat_est:  # the verl name of GRPO's statistics over the kept group: mapped
            given = "est" if self.sampler_name == "est" else self.advantage_estimator
            if given not in (None, "grpo", "reinforce_ada"):
                raise ValueError(
                    f"global_stat_est=False selects advantage_estimator='grpo', which conflicts with advantage_estimator"
                    f"={given!r}: drop global_stat_est=False, or set advantage_estimator='grpo' without Est."
                )
            self.advantage_estimator = "grpo"
        if self.advantage_estimator is None:  # the sampler's own: Est's, the pooled one of the rounds, else TRL's
            own = {"est": "est", "reinforce_ada": "reinforce_ada", "budget": "reinforce_ada"}
            self.advantage_estimator = own.get(self.sampler_name, "grpo")
        estimator = self.advantage_estimator
        if estimator not in ADVANTAGE_ESTIMATORS and (
            not ("." in str(estimator) or ":" in str(estimator))
            or not callable(import_path(estimator, "advantage_estimator"))
        ):
            raise ValueError(
                f"advantage_estimator={estimator!r} is not valid: use one of {list(ADVANTAGE_ESTIMATORS)}, or an "
                "import path 'module.function' to a function of yours (docs/samplers.md)."
            )
        if (estimator == "est") != self.reinforce_ada_est:
            raise ValueError(
                f"advantage_estimator={estimator!r} with reinforce_ada_est={self.reinforce_ada_est} (sampler="
                f"{self.sampler!r}): only Est's allocation and the 'est' estimator fit each other. Leave it unset."
            )
        if estimator == "reinforce_ada" and self.sampler_name in ("grpo", "dapo"):
            raise ValueError(
                f"advantage_estimator='reinforce_ada' reads the pool that adaptive sampling draws, which sampler="
                f"{self.sampler!r} does not: set advantage_estimator='grpo', or sampler='reinforce_ada'."
            )
        if self.pool_std_scaling and estimator != "reinforce_ada":
            raise ValueError(
                "pool_std_scaling=True scales the pooled estimator's advantages (global_stat_est=True) only: "
                "for GRPO-style scaling set scale_rewards."
            )
        if self.pool_baseline is None:  # the sum of several rewards is not centred by a share of positives
            summed = self.positive_reward_func in (None, "weighted_sum")
            self.pool_baseline = "threshold_fraction" if summed else "mean_reward"
        check_one_of(self, "pool_baseline", BASELINES)

        if self.prompt_memory_group_column is not None and self.sampler_name in _MEMORYLESS_BUILT_INS:
            raise ValueError(
                f"prompt_memory_group_column={self.prompt_memory_group_column!r} only informs a sampler that reads "
                "the prompt memory: set sampler='budget', 'est', 'knapsack' or your own, or drop it."
            )
        if self.sampler_name != "grpo":
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ValueError(
                    f"multi_objective_aggregation={self.multi_objective_aggregation!r} normalizes each reward within "
                    f"the trained group, so a sample has no reward until its group is chosen; sampler={self.sampler_name!r} "
                    "needs one as soon as it is scored. Use 'sum_then_normalize' (weigh the functions with "
                    "reward_weights), or sampler='grpo'."
                )
            rows_per_rank = self.per_device_train_batch_size * self.steps_per_generation
            if rows_per_rank % self.num_generations != 0:  # every rank hands TRL whole groups of its prompts
                raise ValueError(
                    f"per_device_train_batch_size * steps_per_generation = {rows_per_rank} rows per process is not a "
                    f"multiple of num_generations ({self.num_generations}): a prompt's group would straddle two "
                    "processes. Set per_device_train_batch_size (or steps_per_generation) so that it is."
                )
        # each built-in's own fields, selected or not, and the selected sampler's (a user's is checked as they are),
        # on the config as resolved: advantage_estimator, pool_baseline and the prompt memory's prior are set by now
        for sampler in dict.fromkeys([*map(sampler_class, BUILT_IN), sampler_class(self.sampler)]):
            getattr(sampler, "check_fields", lambda args: None)(self)
        self._warn_of_ignored_fields(as_set)
        check_sampler(self)  # sampler_kwargs, and a built-in's own settings: now, not once the model has loaded

    def _select_sampler(self) -> None:
        """One selector: `sampler` names the allocation rule; the older switches map onto it (as TRL maps old
        values, with a FutureWarning), and a switch that selects another sampler than the chosen one is refused."""
        budget = self.sampling_budget
        switches = {  # an older switch as written: the sampler it selects, whether it is on, how to turn it off
            "reinforce_ada_est=True": ("est", self.reinforce_ada_est, "reinforce_ada_est=False"),
            f"sampling_budget={budget}": ("budget", budget is not None, "sampling_budget=None"),
            "multiround_adaptive_downsampling=False": (  # one round of n: GRPO, or DAPO where refills are asked
                "dapo" if self.dynamic_sampling or self.sampler == "dapo" else "grpo",
                self.multiround_adaptive_downsampling is False,
                "multiround_adaptive_downsampling=True",
            ),
        }
        on = [(written, name, off) for written, (name, flag, off) in switches.items() if flag]
        for written, name, _ in on:
            if self.sampler is None or name != "budget":  # sampling_budget is the budget's own setting too
                warnings.warn(
                    f"Selecting the sampler with {written} is deprecated and will be removed: set sampler={name!r} "
                    "instead (the sampler's own settings stay as they are).",
                    FutureWarning,
                    stacklevel=4,  # the caller of the constructor
                )
        chosen = self.sampler if self.sampler is not None else on[0][1] if on else "reinforce_ada"
        if isinstance(chosen, (str, type)):  # a built-in's class or import path is that built-in, by its name
            chosen = built_in_name(chosen) or chosen
        # what the settings follow: a built-in's name (an instance of one too), else the class's import path
        kind = built_in_name(chosen) or sampler_name(chosen)
        shown = self.sampler if isinstance(self.sampler, str) else sampler_name(self.sampler)  # a class by its path
        by = f"sampler={shown!r}" if self.sampler else on[0][0] if on else ""
        for written, name, off in on:
            if name != kind:
                fix = f"sampler={name!r}" if self.sampler else on[0][2]
                raise ValueError(f"{by} conflicts with {written}, which selects sampler={name!r}: set {off} or {fix}.")
        cls = sampler_class(chosen)  # an unknown name or an import path that does not import fails here, named
        for name, readers in _EXTENSIONS.items():
            if getattr(self, name) and kind not in readers:
                fix = "dapo" if (name, kind) == ("dynamic_sampling", "grpo") else "reinforce_ada"
                how = "" if self.sampler or not on else f" (selected by {by})"
                raise ValueError(
                    f"{name}=True extends Reinforce-Ada's rounds and cannot be combined with sampler={kind!r}{how}: "
                    f"set {name}=False, or set sampler={fix!r}."
                )
        if self.multiround_adaptive_downsampling and kind in ("grpo", "dapo"):  # set True, read as rounds
            raise ValueError(
                f"multiround_adaptive_downsampling=True samples in rounds, which sampler={kind!r} does not: drop it "
                "(it is deprecated), or set sampler='reinforce_ada'."
            )
        self.sampler, self.reinforce_ada_est = chosen, kind == "est"
        self.multiround_adaptive_downsampling = kind not in ("grpo", "dapo")
        self.dynamic_sampling = self.dynamic_sampling or kind == "dapo"
        if kind == "budget" and self.sampling_budget is None:
            self.sampling_budget = float(self.num_generations)  # GRPO's generation: the budget at parity
        reads_memory = bool(getattr(cls, "uses_prompt_memory", False))
        if self.prompt_memory is False and reads_memory:  # set False: not silently turned on
            raise ValueError(
                f"prompt_memory=False with sampler={kind!r}, which reads the prompt memory: drop prompt_memory=False "
                "(it is turned on for this sampler), or choose a sampler that does not read it."
            )
        self.prompt_memory = bool(self.prompt_memory) or reads_memory

    def _warn_of_ignored_fields(self, as_set: dict) -> None:
        """Name the fields set away from their defaults (`as_set`: as the user set them) that the chosen sampling does
        not read (a sampler of the user's may read any field: only the built-ins' are known), and `scale_rewards`
        where the advantages are not GRPO's."""
        reads = {
            "reinforce_ada": _ROUNDS_FIELDS + (_DYNAMIC_FIELDS if self.dynamic_sampling else ()),
            "dapo": _DYNAMIC_FIELDS,
            "budget": _BUDGET_FIELDS + ("max_refill_batches",),
            "est": _EST_FIELDS,
            "retire_solved": ("max_refill_batches",),
        }.get(self.sampler_name, ())
        no_memory = not self.prompt_memory and self.prompt_memory_group_column is None  # no pass rate is remembered
        unread = {
            "positive_threshold": not self.reads_positives,
            "positive_reward_func": not (self.reads_positives or self.dynamic_sampling),  # DAPO's signal reads it
            "pool_baseline": self.advantage_estimator != "reinforce_ada",
            "prompt_memory_decay": not self.prompt_memory,
            "prompt_memory_prior_alpha": no_memory,
            "prompt_memory_prior_beta": no_memory,
            **dict.fromkeys(_BUDGET_SKIP_FIELDS, self.sampler_name != "budget" or no_memory),  # skips need one
        }
        fields = dict.fromkeys(_ROUNDS_FIELDS + _DYNAMIC_FIELDS + _BUDGET_FIELDS + _EST_FIELDS + tuple(unread))
        known = self.sampler_name in BUILT_IN
        # what the chosen built-in does not read, whatever its value (trl-ada-compare tells arms apart without them)
        self.unread_fields = tuple(f for f in fields if known and (unread[f] if f in unread else f not in reads))
        for name in self.unread_fields:
            if as_set[name] != _DEFAULTS[name]:
                memory = ", prompt_memory=False" if name in _MEMORY_READERS and not self.prompt_memory else ""
                warnings.warn(
                    f"{name}={as_set[name]!r} has no effect with sampler={self.sampler_name!r} (advantage_estimator="
                    f"{self.advantage_estimator!r}{memory}): it is ignored.",
                    UserWarning,
                    stacklevel=4,
                )
        if self.advantage_estimator != "grpo" and self.scale_rewards != "group":
            pooled = " (pool_std_scaling scales pooled ones)" if self.advantage_estimator == "reinforce_ada" else ""
            # TRL's frac_reward_zero_std takes the batch's std under 'batch' (Est's is recomputed per prompt).
            batch = self.scale_rewards == "batch" and self.sampler_name != "est"
            warnings.warn(
                f"scale_rewards={self.scale_rewards!r} does not change the advantages of advantage_estimator="
                f"{self.advantage_estimator!r}: it scales GRPO's group advantages only{pooled}"
                + ("; TRL's frac_reward_zero_std still reads the batch's std." if batch else "."),
                UserWarning,
                stacklevel=4,
            )

    @property
    def replaces_grpo_advantages(self) -> bool:
        """Whether the advantages are the estimator's own, not TRL's group statistics over the kept samples (which
        `advantage_estimator='grpo'` keeps; `global_stat_est=False` maps onto it)."""
        return self.advantage_estimator != "grpo"

    @property
    def reads_positives(self) -> bool:
        """Whether anything decides with "reward > positive_threshold": the rounds' exit rule and selection, the
        budget's top-ups, the prompt memory (Est's and the knapsack's allocation), the share-of-positives baseline;
        and a user's sampler, which may read the positives `context.sample` returns (nothing here can tell)."""
        return (
            self.sampler_name in ("reinforce_ada", "budget", "est", "knapsack", "retire_solved")
            or self.sampler_name not in BUILT_IN
            or self.prompt_memory
            or (self.advantage_estimator == "reinforce_ada" and self.pool_baseline == "threshold_fraction")
        )

    @property
    def sampler_name(self) -> str:
        """`sampler` as text: a built-in's name (also for an instance of one), else a class or instance given from
        Python by its class's import path."""
        return built_in_name(self.sampler) or sampler_name(self.sampler)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "sampler": self.sampler_name}  # logs and model cards take text

    def __getstate__(self) -> dict:
        # Checkpoints pickle the config (training_args.bin): a sampler object is saved by its name, so that one
        # holding what pickle cannot take (a lock, an open file) still checkpoints; its state goes through its own
        # state_dict into ada_sampler_state.json.
        return {**self.__dict__, "sampler": self.sampler_name}

    @property
    def sampling_active(self) -> bool:
        """Whether AdaGRPOTrainer takes over sampling (adaptive rounds or budget, Est, dynamic sampling, prompt
        memory)."""
        return self.sampler_name != "grpo" or self.prompt_memory


_OWN = [f for f in dataclasses.fields(AdaGRPOConfig) if f.name not in {g.name for g in dataclasses.fields(GRPOConfig)}]
_OWN_BOOLS = tuple(f.name for f in _OWN if f.type in ("bool", bool))
_DEFAULTS = {f.name: f.default for f in _OWN}
_EST_FIELDS = ("est_exponent", "est_min_samples", "est_max_samples", "est_epsilon")
_BUDGET_SKIP_FIELDS = ("budget_skip_threshold", "budget_skip_decay", "budget_explore_floor")  # what screening reads
_BUDGET_FIELDS = ("budget_top_up", *_BUDGET_SKIP_FIELDS)
_MEMORY_READERS = (
    "prompt_memory_decay",
    "prompt_memory_prior_alpha",
    "prompt_memory_prior_beta",
    *_BUDGET_SKIP_FIELDS,
)
# The built-in samplers that never read the prompt memory: a column grouping its prompts would inform nothing.
_MEMORYLESS_BUILT_INS = ("grpo", "reinforce_ada", "dapo", "retire_solved")
_ROUNDS_FIELDS = ("reinforce_ada_choice", "round_repeat", "max_rounds", "pool_selection")
_DYNAMIC_FIELDS = ("max_refill_batches", "dynamic_sampling_tolerance")
# The rounds' extensions, by the samplers that read them: another sampler would ignore them.
_EXTENSIONS = {"dynamic_sampling": ("reinforce_ada", "dapo"), "pipelined_rounds": ("reinforce_ada",)}


def trainer_config(args, model) -> AdaGRPOConfig:
    """The trainer's config: as GRPOTrainer does without one, a default config with its output folder named after
    the model; a plain GRPOConfig is refused with the fix."""
    if args is None:
        from trl.trainer.utils import get_config_model_id

        model_name = model if isinstance(model, str) else get_config_model_id(model.config)
        return AdaGRPOConfig(f"{model_name.split('/')[-1]}-AdaGRPO")
    if not isinstance(args, AdaGRPOConfig):
        raise TypeError(
            f"AdaGRPOTrainer needs args=AdaGRPOConfig(...), got {type(args).__name__}. Replace GRPOConfig with "
            "trl_ada.AdaGRPOConfig (it takes the same fields)."
        )
    return args
