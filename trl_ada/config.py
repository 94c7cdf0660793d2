"""`AdaGRPOConfig`: `GRPOConfig` plus the knobs of Reinforce-Ada's adaptive sampling."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass, field

from trl import GRPOConfig

from trl_ada.core.advantages import BASELINES
from trl_ada.core.sampling import CHOICES, SELECTIONS, normalize_choice
from trl_ada.samplers import BUILT_IN, import_path, sampler_class


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

# GRPOConfig's enumerated fields (trl 1.16) that TRL reads only inside a training step, after the first generation.
TRL_CHOICES = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none"),  # after GRPOConfig maps True and False to 'group' and 'none'
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
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

        multiround_adaptive_downsampling (`bool`, *optional*, defaults to `True`):
            Sample in rounds with successive elimination; `False` is GRPO's plain sampling.
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
            Est instead of rounds: N_x samples per prompt from its remembered pass rate, one generation call.
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

        prompt_memory (`bool`, *optional*, defaults to `False`):
            Remember each prompt's pass rate across steps (decayed Beta counts, saved in checkpoints).
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
            "path 'module.Class' to your own sampler (trl_ada.samplers.protocol; importable from the current folder). None "
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
    multiround_adaptive_downsampling: bool = field(
        default=True,
        metadata={
            "help": "Sample in rounds with successive elimination and keep a group of `num_generations` per prompt "
            "(Reinforce-Ada). False: GRPO's plain sampling of `num_generations` per prompt."
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
            "only with reinforce_ada_est) or 'maxrl' (MaxRL's (r - mean) / mean, the mean over the prompt's pool, or "
            "its group with sampling off; 0 where the mean is 0 or below). Default: 'est' with reinforce_ada_est, else 'reinforce_ada' with adaptive "
            "sampling, 'grpo' without, so that multiround_adaptive_downsampling=False is exactly GRPOTrainer. Or an "
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
            "help": "Reinforce-Ada-Est (the paper's v3, Algorithm 1) instead of the rounds: each prompt's number of "
            "samples N_x is allocated up front from its remembered pass rate p_x (the prompt memory, turned on), "
            "proportional to (p_x + est_epsilon) ** -est_exponent within [est_min_samples, est_max_samples], "
            "num_generations per prompt on average (the generation batch GRPO makes); one generation call; every "
            "sample is trained on with advantage (r - mean_x) * (mean_x + est_epsilon) ** -(1 - est_exponent), "
            "mean_x the mean reward of the prompt's N_x samples (trl_ada/core/est.py). Rewards are read as pass "
            "rates, in [0, 1]: others are warned of (a mean at or below 0 would get the weight "
            "est_epsilon ** -(1 - est_exponent))."
        },
    )
    est_exponent: float = field(
        default=0.5,
        metadata={
            "help": "With reinforce_ada_est: N_x is proportional to (p_x + est_epsilon) ** -est_exponent and the "
            "advantage carries the residual weight (mean_x + est_epsilon) ** -(1 - est_exponent), so each prompt's "
            "total weight is 1/p. 0.5: the paper's hybrid (its Est); 1.0: the paper's implicit arm and the authors' "
            "code (no residual weight); 0.0: uniform allocation, explicit weight only."
        },
    )
    est_min_samples: int = field(
        default=2,
        metadata={
            "help": "With reinforce_ada_est: fewest samples a prompt gets (>= 2: one sample has no baseline, so no "
            "advantage; <= num_generations, the average, so that every prompt can have it)."
        },
    )
    est_max_samples: int | None = field(
        default=None,
        metadata={
            "help": "With reinforce_ada_est: most samples a prompt gets (>= num_generations). None (the default): no "
            "cap, as in the authors' code."
        },
    )
    est_epsilon: float = field(
        default=1e-6,
        metadata={
            "help": "With reinforce_ada_est: added to p_x in the allocation and to mean_x in the residual weight "
            "(the authors clamp p at 1e-6)."
        },
    )

    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop prompts whose kept group has no learning signal (all rewards equal "
            "within dynamic_sampling_tolerance) and sample prompts drawn from the training set in their place, until "
            "the step has its full number of groups with signal or max_refill_batches is reached (then it trains on "
            "what there is). With multiround_adaptive_downsampling=False this is DAPO exactly."
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
    prompt_memory: bool = field(
        default=False,
        metadata={
            "help": "Remember each prompt's pass rate across steps: a Beta posterior from decayed counts of every "
            "scored completion ('Ada-EMA'), keyed by a content hash of the prompt, saved in every checkpoint and "
            "exported to <output_dir>/prompt_memory.parquet at the end of training."
        },
    )
    prompt_memory_decay: float | None = field(
        default=None,
        metadata={
            "help": "Each visit multiplies a prompt's old counts by this factor in (0, 1] before adding the new "
            "samples: 0.5 gives the last visit about half of the weight; 1.0 never forgets. None (the default): 0.5, "
            "or 0.9 with reinforce_ada_est (the authors' Ada-EMA)."
        },
    )
    prompt_memory_prior_alpha: float | None = field(
        default=None,
        metadata={
            "help": "Beta prior pseudo-count of successes. None (the default): 1.0 (with beta 1.0: the uniform "
            "prior; with reinforce_ada_est, beta 16.0: the authors' Ada-EMA prior)."
        },
    )
    prompt_memory_prior_beta: float | None = field(
        default=None,
        metadata={
            "help": "Beta prior pseudo-count of failures. None (the default): 1.0, or 16.0 with reinforce_ada_est "
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
            "pool_selection) do not apply. Needs >= num_generations; best with prompt_memory=True. None (the "
            "default): the reference rounds."
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
            "help": "With sampling_budget or reinforce_ada_est: a dataset column that groups prompts (a problem "
            "kind, a source, a difficulty level). The pass rates seen in each group are fitted as a Beta distribution "
            "(trl_ada.core.memory.GroupPrior) and used as the prior of every prompt of the group, so a prompt never "
            "seen before is screened (budget) or allocated (Est) by what its group's prompts did. Worth it when a run rarely meets a prompt twice. None (the default): every "
            "prompt starts from the flat prior."
        },
    )
    budget_explore_floor: float = field(
        default=0.05,
        metadata={
            "help": "With sampling_budget: a prompt that would be skipped is sampled anyway with this probability, "
            "so no prompt is starved forever."
        },
    )

    def __post_init__(self):
        as_set = {name: getattr(self, name) for name in _DEFAULTS}  # as the user set them, before any is resolved
        # TRL divides by num_generations before it checks it: a bad value would surface as a ZeroDivisionError.
        if (
            isinstance(self.num_generations, bool)
            or not isinstance(self.num_generations, int)
            or self.num_generations < 2
        ):
            raise ValueError(
                f"num_generations={self.num_generations!r} must be an integer >= 2: GRPO needs at least 2 completions "
                "per prompt for a baseline (the paper uses 4)."
            )
        # TRL's own checks first: they derive steps_per_generation and generation_batch_size, which ours use.
        super().__post_init__()

        for name, allowed in TRL_CHOICES.items():  # TRL reads these only once a step runs: checked here, at once
            _check_one_of(name, getattr(self, name), allowed)
        for name in _OWN_BOOLS:  # a string such as "false" would read as True in every `if`
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False (a bool, not a string).")
        self.reinforce_ada_choice = _normalize_field_choice(self.reinforce_ada_choice)
        self._select_sampler()
        for name in BUILT_IN:  # the built-in samplers' own fields, each checked by its sampler
            check_fields = getattr(sampler_class(name), "check_fields", None)
            if check_fields is not None:
                check_fields(self)
        if self.reinforce_ada_est:
            self._check_est()
        # The estimator's defaults: the authors' Ada-EMA for Est (docs/knobs.md says why), a flat prior otherwise.
        est = self.reinforce_ada_est
        for name, plain, ada_ema in (
            ("prompt_memory_decay", 0.5, 0.9),
            ("prompt_memory_prior_alpha", 1.0, 1.0),
            ("prompt_memory_prior_beta", 1.0, 16.0),
        ):
            if getattr(self, name) is None:
                setattr(self, name, ada_ema if est else plain)
        if not self.global_stat_est:  # the verl name of GRPO's statistics over the kept group: mapped
            given = "est" if est else self.advantage_estimator
            if given not in (None, "grpo", "reinforce_ada"):
                raise ValueError(
                    f"global_stat_est=False selects advantage_estimator='grpo' (the kept group's own statistics), "
                    f"which conflicts with advantage_estimator={given!r}. Drop global_stat_est=False, or set "
                    "advantage_estimator='grpo' without Est."
                )
            self.advantage_estimator = "grpo"
        if self.advantage_estimator is None:
            if est:
                self.advantage_estimator = "est"
            elif self.sampler not in BUILT_IN or self.sampler in ("knapsack", "retire_solved"):
                self.advantage_estimator = "grpo"  # a sampler's own (Selection.advantages), else TRL's per group
            else:
                self.advantage_estimator = "reinforce_ada" if self.multiround_adaptive_downsampling else "grpo"
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:  # a function of the user's, `module.name`
            if "." not in str(self.advantage_estimator):
                _check_one_of("advantage_estimator", self.advantage_estimator, ADVANTAGE_ESTIMATORS)
            if not callable(import_path(self.advantage_estimator, "advantage_estimator")):
                raise ValueError(f"advantage_estimator={self.advantage_estimator!r} is not a function.")
        if self.positive_reward_func is not None and (
            not isinstance(self.positive_reward_func, str) or not self.positive_reward_func
        ):
            raise ValueError(
                f"positive_reward_func={self.positive_reward_func!r} must be the name of one reward function (as in "
                "the trainer's reward_func_names, e.g. 'accuracy_reward'), or None."
            )
        if self.pool_baseline is None:  # the sum of several rewards is not centred by a share of positives
            one_function = self.positive_reward_func not in (None, "weighted_sum")
            self.pool_baseline = "mean_reward" if one_function else "threshold_fraction"
        _check_one_of("pool_baseline", self.pool_baseline, BASELINES)
        _check_one_of("pool_selection", self.pool_selection, SELECTIONS)

        if not _is_number(self.positive_threshold):
            raise ValueError(
                f"positive_threshold={self.positive_threshold!r} must be a finite number (the reference uses 0.7 for "
                "0/1 rewards): set positive_threshold=0.7, or a value between your reward's wrong and right scores."
            )
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds < 1:
            raise ValueError(f"max_rounds={self.max_rounds!r} must be an integer >= 1 (the reference uses 4).")
        if self.round_repeat is None:  # the reference's 8, or one group's worth where n is larger
            self.round_repeat = max(8, self.num_generations)
        # Only the rounds read round_repeat: GRPO at num_generations=16 with sampling off must not need it raised.
        if self.sampler == "reinforce_ada" and (
            isinstance(self.round_repeat, bool)
            or not isinstance(self.round_repeat, int)
            or self.round_repeat < self.num_generations
        ):
            raise ValueError(
                f"round_repeat={self.round_repeat!r} must be an integer >= num_generations ({self.num_generations}): "
                f"one round must be able to fill a group. Set round_repeat >= {self.num_generations} (the reference "
                "uses 8 with num_generations=4)."
            )

        if (self.advantage_estimator == "est") != bool(self.reinforce_ada_est):
            raise ValueError(
                f"advantage_estimator={self.advantage_estimator!r} with reinforce_ada_est={self.reinforce_ada_est}: "
                "Est's samples come in groups of unequal size, which only the 'est' estimator reads, and the 'est' "
                "estimator needs Est's allocation. Leave advantage_estimator unset (None) to get the matching one."
            )
        if self.advantage_estimator == "reinforce_ada" and not self.multiround_adaptive_downsampling:
            raise ValueError(
                "advantage_estimator='reinforce_ada' needs multiround_adaptive_downsampling=True (it reads the "
                "statistics of the sampled pool). Turn adaptive sampling on, or pick advantage_estimator='grpo'."
            )
        if self.pool_std_scaling and not (self.advantage_estimator == "reinforce_ada" and self.global_stat_est):
            raise ValueError(
                "pool_std_scaling=True only applies to the pooled estimator (advantage_estimator='reinforce_ada' with "
                "global_stat_est=True). For GRPO-style std scaling use `scale_rewards`."
            )

        if (
            isinstance(self.max_refill_batches, bool)
            or not isinstance(self.max_refill_batches, int)
            or (self.max_refill_batches < 0)
        ):
            raise ValueError(
                f"max_refill_batches={self.max_refill_batches!r} must be an integer >= 0 (DAPO uses 10; 0 never "
                "refills)."
            )
        if not _is_number(self.dynamic_sampling_tolerance) or self.dynamic_sampling_tolerance < 0:
            raise ValueError(
                f"dynamic_sampling_tolerance={self.dynamic_sampling_tolerance!r} must be a finite number >= 0 "
                "(default 1e-6)."
            )
        if not _is_number(self.prompt_memory_decay) or not 0 < self.prompt_memory_decay <= 1:
            raise ValueError(
                f"prompt_memory_decay={self.prompt_memory_decay!r} must be in (0, 1]: 0.5 (the default) halves old "
                "counts at each visit, 1.0 never forgets."
            )
        for name in ("prompt_memory_prior_alpha", "prompt_memory_prior_beta"):
            value = getattr(self, name)
            if not _is_number(value) or value <= 0:
                raise ValueError(f"{name}={value!r} must be a finite number > 0 (1.0 with its pair: uniform prior).")
        if self.sampling_budget is not None:
            if not self.multiround_adaptive_downsampling:
                raise ValueError(
                    "sampling_budget replaces the reference rounds and needs multiround_adaptive_downsampling=True. "
                    "Set sampling_budget=None for plain GRPO sampling."
                )
            if self.dynamic_sampling:
                raise ValueError(
                    "sampling_budget and dynamic_sampling=True cannot be combined: dynamic sampling refills after "
                    "sampling, which a hard budget cannot pay for; the budget already skips prompts predicted to come "
                    "back uniform. Set dynamic_sampling=False."
                )
        if self.pipelined_speculation and not self.pipelined_rounds:
            raise ValueError(
                "pipelined_speculation=True speculates within barrier-free rounds: set pipelined_rounds=True too "
                "(vLLM colocate), or pipelined_speculation=False."
            )
        if self.pipelined_rounds:
            if not self.multiround_adaptive_downsampling or self.sampling_budget is not None:
                raise ValueError(
                    "pipelined_rounds=True pipelines Reinforce-Ada's rounds: it needs "
                    "multiround_adaptive_downsampling=True and sampling_budget=None (the budgeted sampler's top-ups "
                    "are synchronous). Set pipelined_rounds=False."
                )
            if not self.use_vllm or self.vllm_mode != "colocate":
                raise ValueError(
                    f"pipelined_rounds=True drives a colocated vLLM engine request by request; got use_vllm="
                    f"{self.use_vllm}, vllm_mode={self.vllm_mode!r}. Set use_vllm=True and vllm_mode='colocate', or "
                    "pipelined_rounds=False (a vLLM server or transformers generation runs the synchronous rounds)."
                )
            if self.vllm_tensor_parallel_size != 1:
                raise ValueError(
                    f"pipelined_rounds=True needs vllm_tensor_parallel_size=1 (got {self.vllm_tensor_parallel_size}): "
                    "a tensor-parallel group shares one engine across processes. Set pipelined_rounds=False."
                )
        if self.prompt_memory_group_column is not None:
            if not isinstance(self.prompt_memory_group_column, str) or not self.prompt_memory_group_column:
                raise ValueError(
                    f"prompt_memory_group_column={self.prompt_memory_group_column!r} must be the name of a dataset "
                    "column (a string), or None."
                )
            if self.rounds_sampler:
                raise ValueError(
                    f"prompt_memory_group_column={self.prompt_memory_group_column!r} only informs a sampler that reads "
                    "the prompt memory (budgeted sampling's screening, Est's and the knapsack's allocation, "
                    "SamplingContext.pass_rate_posterior): set sampler='budget' (e.g. sampling_budget=4.0 for GRPO parity), "
                    "'est', 'knapsack' or your own, or drop it."
                )
        if self.sampler != "grpo":
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ValueError(
                    f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not supported with adaptive "
                    "or dynamic sampling: it normalizes each reward function within the group that is trained, so a "
                    "sample has no reward until its group is chosen, while the exit rule, the selection and the pooled "
                    "baseline need one reward per sample as soon as it is scored. Use 'sum_then_normalize' (weight "
                    "the reward functions with reward_weights), or turn adaptive and dynamic sampling off."
                )
            # A prompt's group must sit on one rank: every rank hands TRL whole groups of num_generations rows.
            rows_per_rank = self.per_device_train_batch_size * self.steps_per_generation
            if rows_per_rank % self.num_generations != 0:
                raise ValueError(
                    f"per_device_train_batch_size * steps_per_generation = {self.per_device_train_batch_size} * "
                    f"{self.steps_per_generation} = {rows_per_rank} rows per process is not a multiple of "
                    f"num_generations ({self.num_generations}), so a prompt's group would straddle two processes. "
                    f"Set per_device_train_batch_size (or steps_per_generation) so that the product is a multiple of "
                    f"{self.num_generations}."
                )
        self._warn_of_ignored_fields(as_set)

    def _select_sampler(self) -> None:
        """One selector: `sampler` names the allocation rule; the older switches map onto it (as TRL maps old
        values), and a switch that selects another sampler than the one named is refused, naming both."""
        if isinstance(self.sampler_kwargs, str):
            try:
                self.sampler_kwargs = json.loads(self.sampler_kwargs)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"sampler_kwargs={self.sampler_kwargs!r} is not JSON ({error}): write it as "
                    "'{\"max_samples\": 32}'."
                ) from None
        if self.sampler_kwargs is not None and not isinstance(self.sampler_kwargs, dict):
            raise ValueError(f"sampler_kwargs={self.sampler_kwargs!r} must be a dict (or its JSON), or None.")
        # The older switches that select a sampler: still honoured, as TRL maps a deprecated value, with a warning.
        old = {
            "reinforce_ada_est=True": ("est", self.reinforce_ada_est),
            "multiround_adaptive_downsampling=False": (
                "dapo" if self.dynamic_sampling else "grpo",
                self.multiround_adaptive_downsampling is False,
            ),
            f"sampling_budget={self.sampling_budget} without a sampler": (
                "budget",
                self.sampler is None and self.sampling_budget is not None and not self.reinforce_ada_est,
            ),
        }
        for switch, (name, on) in old.items():
            if on:
                warnings.warn(
                    f"{switch} is deprecated and will be removed: set sampler={name!r} instead (the sampler's own "
                    "settings stay as they are).",
                    FutureWarning,
                    stacklevel=5,
                )
        selected = [
            name
            for name, on in (
                ("est", self.reinforce_ada_est),
                ("budget", self.sampling_budget is not None),
                ("dapo", self.dynamic_sampling and not self.multiround_adaptive_downsampling),
            )
            if on
        ]
        if self.sampler is None:
            if self.reinforce_ada_est:  # Est and the budget are refused together below, naming both
                self.sampler = "est"
            elif self.sampling_budget is not None:
                self.sampler = "budget"
            elif not self.multiround_adaptive_downsampling:
                self.sampler = "dapo" if self.dynamic_sampling else "grpo"
            else:
                self.sampler = "reinforce_ada"
            return
        switch = {
            "est": "reinforce_ada_est=True",
            "budget": f"sampling_budget={self.sampling_budget}",
            "dapo": "dynamic_sampling=True with multiround_adaptive_downsampling=False",
        }
        conflicts = [name for name in selected if name != self.sampler]
        if conflicts:
            raise ValueError(
                f"sampler={self.sampler!r} conflicts with {switch[conflicts[0]]}, which selects sampler="
                f"{conflicts[0]!r}. Drop {switch[conflicts[0]].split(' with')[0]}, or set sampler="
                f"{conflicts[0]!r}."
            )
        sampler_class(self.sampler)  # an unknown name or an import path that does not import fails here, named
        if self.sampler in ("reinforce_ada", "budget") and not self.multiround_adaptive_downsampling:
            raise ValueError(
                f"sampler={self.sampler!r} conflicts with multiround_adaptive_downsampling=False, which selects "
                "sampler='grpo'. Drop multiround_adaptive_downsampling=False, or set sampler='grpo'."
            )
        if not self.rounds_sampler:  # the rounds' extensions, which another sampler would silently skip
            for name, on in (("dynamic_sampling", self.dynamic_sampling), ("pipelined_rounds", self.pipelined_rounds)):
                if on and not (name == "pipelined_rounds" and self.sampler == "est"):  # Est refuses it, naming why
                    raise ValueError(
                        f"{name}=True extends Reinforce-Ada's rounds; sampler={self.sampler!r} allocates its own "
                        f"samples and would ignore it. Set {name}=False (a sampler of your own can draw refills with "
                        "SamplingContext.draw)."
                    )
        if self.sampler == "grpo":
            self.multiround_adaptive_downsampling = False
            if self.dynamic_sampling:
                raise ValueError("sampler='grpo' with dynamic_sampling=True is DAPO: set sampler='dapo'.")
        elif self.sampler == "dapo":
            self.multiround_adaptive_downsampling, self.dynamic_sampling = False, True
        elif self.sampler == "reinforce_ada":
            self.multiround_adaptive_downsampling = True
        elif self.sampler == "budget":
            self.multiround_adaptive_downsampling = True
            if self.sampling_budget is None:
                self.sampling_budget = float(self.num_generations)  # GRPO's generation: the budget at parity
        elif self.sampler == "est":
            self.reinforce_ada_est = True
        elif self.sampler == "knapsack":
            self.prompt_memory = True  # its allocation values each prompt by its remembered pass rate

    @property
    def rounds_sampler(self) -> bool:
        """Whether the sampler is the rounds (GRPO, Reinforce-Ada, DAPO): the fields of the rounds apply."""
        return self.sampler in ("grpo", "reinforce_ada", "dapo")

    def _check_est(self) -> None:
        """What cannot hold with Reinforce-Ada-Est (each error names the fix)."""
        for name, other in (
            ("sampling_budget", self.sampling_budget is not None),
            ("dynamic_sampling", self.dynamic_sampling),
            ("pipelined_rounds", self.pipelined_rounds),
        ):
            if other:
                raise ValueError(
                    f"reinforce_ada_est=True and {name} cannot be combined: Est allocates every prompt's samples up "
                    "front and trains on all of them (no rounds, no refills, no skipping). Unset "
                    f"{name}, or set reinforce_ada_est=False."
                )
        self.prompt_memory = True  # Est's estimator of p_x is the prompt memory

    def _warn_of_ignored_fields(self, as_set: dict) -> None:
        """Name the fields set away from their defaults (`as_set`: as the user set them) that the chosen sampling does
        not read. A sampler of the user's may read any field: only the built-ins' are known."""
        reads = {
            "reinforce_ada": _ROUNDS_FIELDS + (_DYNAMIC_FIELDS if self.dynamic_sampling else ()),
            "grpo": (),
            "dapo": _DYNAMIC_FIELDS,
            "budget": _BUDGET_FIELDS + ("max_refill_batches",),
            "est": _EST_FIELDS,
            "knapsack": (),
            "retire_solved": ("max_refill_batches",),
        }.get(self.sampler)
        if reads is not None:
            known = _ROUNDS_FIELDS + _DYNAMIC_FIELDS + _BUDGET_FIELDS + _EST_FIELDS
            ignored = [name for name in known if name not in reads]
            if not self.reads_positives:
                ignored.append("positive_threshold")
            if not (self.reads_positives or self.dynamic_sampling):  # DAPO's signal: the rewards that decide one
                ignored.append("positive_reward_func")
            if self.advantage_estimator != "reinforce_ada":
                ignored.append("pool_baseline")
            for name in ignored:
                if as_set[name] != _DEFAULTS[name]:
                    warnings.warn(
                        f"{name}={as_set[name]!r} has no effect with sampler={self.sampler!r} (advantage_estimator="
                        f"{self.advantage_estimator!r}): it is ignored.",
                        UserWarning,
                        stacklevel=4,
                    )  # the caller of the constructor (with the lock's transformers)
        if self.replaces_grpo_advantages and self.scale_rewards != "group":
            pooled = (
                " (pool_std_scaling scales the pooled ones)" if self.advantage_estimator == "reinforce_ada" else ""
            )
            # TRL's frac_reward_zero_std takes the batch's std under 'batch' (Est's is recomputed per prompt).
            metric = (
                "; TRL's frac_reward_zero_std still reads the batch's std"
                if self.scale_rewards == "batch" and not self.reinforce_ada_est
                else ""
            )
            warnings.warn(
                f"scale_rewards={self.scale_rewards!r} does not change the advantages of advantage_estimator="
                f"{self.advantage_estimator!r}: it scales GRPO's group advantages only{pooled}{metric}.",
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
        budget's top-ups, the prompt memory (Est's and the knapsack's allocation), the share-of-positives baseline."""
        return (
            self.sampler in ("reinforce_ada", "budget", "est", "knapsack", "retire_solved")
            or self.prompt_memory
            or (self.advantage_estimator == "reinforce_ada" and self.pool_baseline == "threshold_fraction")
        )

    @property
    def sampling_active(self) -> bool:
        """Whether AdaGRPOTrainer takes over sampling (adaptive rounds or budget, Est, dynamic sampling, prompt
        memory)."""
        return self.sampler != "grpo" or self.prompt_memory


_OWN = [f for f in dataclasses.fields(AdaGRPOConfig) if f.name not in {g.name for g in dataclasses.fields(GRPOConfig)}]
_OWN_BOOLS = tuple(f.name for f in _OWN if f.type in ("bool", bool))
_DEFAULTS = {f.name: f.default for f in _OWN}
_EST_FIELDS = ("est_exponent", "est_min_samples", "est_max_samples", "est_epsilon")
_BUDGET_FIELDS = ("budget_top_up", "budget_skip_threshold", "budget_skip_decay", "budget_explore_floor")
_ROUNDS_FIELDS = ("reinforce_ada_choice", "round_repeat", "max_rounds", "pool_selection")
_DYNAMIC_FIELDS = ("max_refill_batches", "dynamic_sampling_tolerance")


def _normalize_field_choice(value: str) -> str:
    try:
        return normalize_choice(value)
    except (ValueError, AttributeError):
        raise ValueError(
            f"reinforce_ada_choice={value!r} is not valid: use one of {list(CHOICES)} ('positive-focused' is accepted "
            "too)."
        ) from None


def _is_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _check_one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not valid: use one of {list(allowed)}.")


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
