"""AdaGRPOConfig: defaults follow the reference, bad values fail early with the field and the fix."""

import warnings

import pytest

from trl_ada import AdaGRPOConfig


def make(**kwargs):
    base = dict(output_dir="unused", num_generations=4, per_device_train_batch_size=8, use_cpu=True, report_to="none")
    base.update(kwargs)
    return AdaGRPOConfig(**base)


def test_defaults_reproduce_the_reference():
    args = make()
    assert args.multiround_adaptive_downsampling is True
    assert (args.reinforce_ada_choice, args.positive_threshold, args.max_rounds, args.round_repeat) == (
        "balanced",
        0.7,
        4,
        8,
    )
    assert args.global_stat_est is True and args.pool_std_scaling is False
    assert args.advantage_estimator == "reinforce_ada"
    assert (args.pool_baseline, args.pool_selection) == ("threshold_fraction", "earliest")


def test_any_group_size_grpoconfig_takes_builds_with_every_sampler():
    """round_repeat follows num_generations unless set (the reference's 8 up to n=8): n=16, which GRPOConfig takes,
    builds with the default sampler, sampling off and the rest; only an explicit round_repeat below n is refused."""
    assert make(num_generations=16, per_device_train_batch_size=16).round_repeat == 16
    assert make(num_generations=2, per_device_train_batch_size=8).round_repeat == 8
    for sampler in ("grpo", "dapo", "budget", "est", "knapsack"):
        assert make(sampler=sampler, num_generations=16, per_device_train_batch_size=16).num_generations == 16
    with pytest.raises(ValueError, match="round_repeat >= 16"):  # with the rounds on, one round must fill a group
        make(num_generations=16, per_device_train_batch_size=16, round_repeat=8)


@pytest.mark.parametrize("value", [1, -4, True])
def test_num_generations_below_two_is_refused_by_trl(value):
    """GRPOConfig's own check, which AdaGRPOConfig does not repeat."""
    with pytest.raises(ValueError, match="at least 2 generations per prompt"):
        make(num_generations=value)


def test_readme_spelling_is_normalised():
    assert make(reinforce_ada_choice="positive-focused").reinforce_ada_choice == "positive_focused"


def test_adaptive_off_defaults_to_grpo():
    assert make(multiround_adaptive_downsampling=False).advantage_estimator == "grpo"
    assert make(multiround_adaptive_downsampling=False, advantage_estimator="reinforce_rej").advantage_estimator == (
        "reinforce_rej"
    )


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"reinforce_ada_choice": "greedy"}, ["reinforce_ada_choice", "'greedy'", "balanced"]),
        ({"advantage_estimator": "ppo"}, ["advantage_estimator", "'ppo'", "reinforce_ada"]),
        ({"pool_baseline": "median"}, ["pool_baseline", "threshold_fraction"]),
        ({"pool_selection": "best"}, ["pool_selection", "earliest"]),
        ({"round_repeat": 2}, ["round_repeat=2", "num_generations (4)", "round_repeat >= 4"]),
        ({"max_rounds": 0}, ["max_rounds=0", ">= 1"]),
        ({"positive_threshold": float("nan")}, ["positive_threshold", "finite"]),
        ({"positive_threshold": float("inf")}, ["positive_threshold", "finite"]),
        # One process: TRL's own generation_batch_size check fires first (tests/integration/test_multiprocess.py checks ours).
        ({"per_device_train_batch_size": 6}, ["generation_batch_size (6)", "num_generations (4)"]),
        (
            {"multiround_adaptive_downsampling": False, "advantage_estimator": "reinforce_ada"},
            ["sampler='reinforce_ada'", "advantage_estimator='grpo'"],
        ),
        ({"pool_std_scaling": True, "global_stat_est": False}, ["pool_std_scaling", "global_stat_est=True"]),
        ({"multi_objective_aggregation": "normalize_then_sum"}, ["multi_objective_aggregation", "sum_then_normalize"]),
        ({"max_refill_batches": -1}, ["max_refill_batches=-1", ">= 0"]),
        ({"max_refill_batches": 1.5}, ["max_refill_batches=1.5", "integer"]),
        ({"dynamic_sampling_tolerance": -0.1}, ["dynamic_sampling_tolerance=-0.1", ">= 0"]),
        ({"prompt_memory_decay": 0.0}, ["prompt_memory_decay=0.0", "(0, 1]"]),
        ({"prompt_memory_decay": 1.5}, ["prompt_memory_decay=1.5", "(0, 1]"]),
        ({"prompt_memory_prior_alpha": 0}, ["prompt_memory_prior_alpha=0", "> 0"]),
        ({"prompt_memory_prior_beta": float("nan")}, ["prompt_memory_prior_beta=nan", "> 0"]),
        ({"sampling_budget": 3.0}, ["sampling_budget=3.0", ">= 4", "num_generations (4)", "sampling_budget=4.0"]),
        ({"sampling_budget": 4.0, "dynamic_sampling": True}, ["sampling_budget", "dynamic_sampling=False"]),
        (
            {"sampling_budget": 4.0, "multiround_adaptive_downsampling": False},
            ["sampling_budget", "multiround_adaptive_downsampling=True"],
        ),
        ({"sampling_budget": 4.0, "budget_top_up": 0}, ["budget_top_up=0", ">= 1"]),
        ({"sampling_budget": 4.0, "budget_explore_floor": 0.0}, ["budget_explore_floor=0.0", "starve"]),
        ({"sampling_budget": 4.0, "budget_skip_threshold": 2}, ["budget_skip_threshold=2", "[0, 1]"]),
        ({"sampling_budget": 4.0, "budget_skip_decay": 0}, ["budget_skip_decay=0", "(0, 1]"]),
        ({"pipelined_speculation": True}, ["pipelined_speculation=True", "pipelined_rounds=True"]),
        ({"pipelined_rounds": True}, ["pipelined_rounds=True", "use_vllm=True", "vllm_mode='colocate'"]),
        ({"pipelined_rounds": True, "use_vllm": True, "vllm_mode": "server"}, ["vllm_mode='server'", "colocate"]),
        (
            {"pipelined_rounds": True, "use_vllm": True, "vllm_tensor_parallel_size": 2},
            ["vllm_tensor_parallel_size=1", "pipelined_rounds=False"],
        ),
        (
            {"pipelined_rounds": True, "use_vllm": True, "sampling_budget": 4.0},
            ["pipelined_rounds=True", "sampler='budget' (selected by sampling_budget=4.0)", "pipelined_rounds=False"],
        ),
        (
            {"pipelined_rounds": True, "use_vllm": True, "multiround_adaptive_downsampling": False},
            ["sampler='grpo' (selected by multiround_adaptive_downsampling=False)", "pipelined_rounds=False"],
        ),
        ({"prompt_memory_group_column": "kind"}, ["prompt_memory_group_column='kind'", "sampler='budget'"]),
        (
            {"sampler": "retire_solved", "prompt_memory_group_column": "kind"},
            ["prompt_memory_group_column='kind'", "sampler='budget'"],
        ),
        (
            {
                "multiround_adaptive_downsampling": False,
                "dynamic_sampling": True,
                "multi_objective_aggregation": "normalize_then_sum",
            },
            ["multi_objective_aggregation", "sum_then_normalize"],
        ),
        # A string in a bool field would read as True; an out-of-range value is refused even with its switch off.
        ({"multiround_adaptive_downsampling": "false"}, ["multiround_adaptive_downsampling='false'", "a bool"]),
        # set False beside a sampler that reads the memory: not silently turned on
        ({"sampler": "est", "prompt_memory": False}, ["prompt_memory=False with sampler='est'", "drop prompt_memory"]),
        ({"sampler": "knapsack", "prompt_memory": False}, ["prompt_memory=False with sampler='knapsack'"]),
        ({"prompt_memory": "false"}, ["prompt_memory='false'", "a bool"]),
        # set True beside a one-round sampler (an old arm on a recipe that says sampler: grpo): not silently GRPO
        (
            {"sampler": "grpo", "multiround_adaptive_downsampling": True},
            ["multiround_adaptive_downsampling=True samples in rounds", "sampler='grpo'", "sampler='reinforce_ada'"],
        ),
        ({"pipelined_rounds": "false"}, ["pipelined_rounds='false'", "a bool"]),
        ({"prompt_memory": 1}, ["prompt_memory=1", "True or False"]),
        ({"max_rounds": True}, ["max_rounds=True", "integer"]),
        ({"budget_top_up": 0}, ["budget_top_up=0", ">= 1"]),
        ({"est_exponent": 5.0}, ["est_exponent=5.0", "[0, 1]"]),
        # Any sampler but GRPO's and DAPO's conflicts with the switch that selects them.
        (
            {"sampler": "est", "multiround_adaptive_downsampling": False},
            ["sampler='est' conflicts with multiround_adaptive_downsampling=False", "which selects sampler='grpo'"],
        ),
        ({"sampler_kwargs": '{"max_samples": 32'}, ["sampler_kwargs='{\"max_samples\": 32'", "is not JSON"]),
        ({"model_init_kwargs": "{dtype: 'bfloat16'}"}, ["model_init_kwargs=", "is not JSON"]),  # TRL's own dict field
        ({"est_min_samples": 0}, ["est_min_samples=0", "in [2, 4]", "num_generations=4", "est_min_samples=2"]),
    ],
)
def test_bad_values_name_the_field_and_the_fix(kwargs, words):
    with pytest.raises(ValueError) as excinfo:
        make(**kwargs)
    for word in words:
        assert word in str(excinfo.value)


def test_global_stat_est_false_is_advantage_estimator_grpo():
    """The verl name maps onto the selector: the kept group's own statistics are GRPO's, with the rounds on."""
    mapped = make(global_stat_est=False)
    assert (mapped.advantage_estimator, mapped.replaces_grpo_advantages) == ("grpo", False)
    assert mapped.sampler == "reinforce_ada"
    assert make(global_stat_est=False, advantage_estimator="reinforce_ada").advantage_estimator == "grpo"
    for conflicting in ({"advantage_estimator": "raft"}, {"reinforce_ada_est": True, "num_generations": 8}):
        with pytest.raises(ValueError, match="global_stat_est=False selects advantage_estimator='grpo'"):
            make(global_stat_est=False, per_device_train_batch_size=16, **conflicting)


def test_straddling_check_counts_steps_per_generation():
    # 2 rows per step * 2 steps per generation = 4 rows: whole groups of 4 on this process.
    args = make(per_device_train_batch_size=2, steps_per_generation=2)
    assert args.generation_batch_size == 4


def test_new_behaviour_is_opt_in():
    args = make()
    assert (args.dynamic_sampling, args.prompt_memory) == (False, False)
    assert (args.max_refill_batches, args.prompt_memory_decay) == (10, 0.5)
    assert make(multiround_adaptive_downsampling=False).sampling_active is False
    assert make(multiround_adaptive_downsampling=False, dynamic_sampling=True).sampling_active is True


def test_plain_grpo_does_not_need_whole_groups_per_process():
    make(per_device_train_batch_size=6, num_generations=3, multiround_adaptive_downsampling=False)


@pytest.mark.parametrize(
    "kwargs, ignored",
    [
        ({"est_exponent": 0.3}, "est_exponent=0.3 has no effect with sampler='reinforce_ada'"),
        ({"budget_skip_threshold": 0.2}, "budget_skip_threshold=0.2 has no effect with sampler='reinforce_ada'"),
        (
            {"sampling_budget": 4.0, "reinforce_ada_choice": "positive_focused"},
            "reinforce_ada_choice='positive_focused' has no effect with sampler='budget'",
        ),
        ({"sampling_budget": 8.0, "round_repeat": 4}, "round_repeat=4 has no effect with sampler='budget'"),
        ({"sampler": "est", "max_rounds": 2}, "max_rounds=2 has no effect with sampler='est'"),
        ({"reinforce_ada_est": True, "max_rounds": 2}, "max_rounds=2 has no effect with sampler='est'"),
        ({"sampler": "grpo", "reinforce_ada_choice": "positive_focused"}, "reinforce_ada_choice='positive_focused' "),
        ({"sampler": "grpo", "round_repeat": 16}, "round_repeat=16 has no effect with sampler='grpo'"),
        ({"sampler": "grpo", "positive_threshold": 0.5}, "positive_threshold=0.5 has no effect with sampler='grpo'"),
        ({"sampler": "dapo", "max_rounds": 2}, "max_rounds=2 has no effect with sampler='dapo'"),
        ({"sampler": "knapsack", "round_repeat": 16}, "round_repeat=16 has no effect with sampler='knapsack'"),
        ({"sampler": "knapsack", "pool_baseline": "mean_reward"}, "pool_baseline='mean_reward' has no effect"),
        ({"sampler": "reinforce_ada", "max_refill_batches": 3}, "max_refill_batches=3 has no effect"),
        # The prompt memory's settings and the budget's skips need a memory to read
        (
            {"sampler": "reinforce_ada", "prompt_memory_decay": 0.8},
            "prompt_memory_decay=0.8 has no effect with sampler='reinforce_ada' (advantage_estimator='reinforce_ada', "
            "prompt_memory=False)",
        ),
        ({"sampler": "grpo", "prompt_memory_prior_beta": 4.0}, "prompt_memory_prior_beta=4.0 has no effect"),
        ({"sampler": "budget", "budget_skip_threshold": 0.3}, "budget_skip_threshold=0.3 has no effect with sampler="),
        (
            {"sampler": "knapsack", "scale_rewards": "batch"},
            "scale_rewards='batch' has no effect with sampler='knapsack'",
        ),
    ],
)
def test_a_field_the_chosen_sampling_does_not_read_is_named(kwargs, ignored):
    with pytest.warns(UserWarning, match=ignored.replace("(", r"\(").replace(")", r"\)")):
        make(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sampler": "budget", "prompt_memory": True, "budget_skip_threshold": 0.3, "prompt_memory_decay": 0.8},
        {"sampler": "budget", "prompt_memory_group_column": "kind", "budget_explore_floor": 0.1},
        {"sampler": "est", "prompt_memory_prior_beta": 4.0},  # Est turns the memory on
    ],
)
def test_memory_settings_a_memory_reads_are_not_named(kwargs):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*has no effect")
        make(**kwargs)


def test_an_old_dapo_recipe_moves_to_the_selector_without_a_conflict():
    """multiround_adaptive_downsampling=False is one round of n: beside sampler='dapo' it is DAPO, not a conflict."""
    with pytest.warns(FutureWarning, match="set sampler='dapo'"):
        args = make(sampler="dapo", multiround_adaptive_downsampling=False)
    assert args.sampler == "dapo" and args.dynamic_sampling


@pytest.mark.parametrize(
    "kwargs, sampling, metric",
    [
        ({"scale_rewards": "batch"}, "reinforce_ada", True),
        ({"scale_rewards": "none"}, "reinforce_ada", False),
        ({"scale_rewards": "batch", "reinforce_ada_est": True}, "est", False),
    ],
)
def test_scale_rewards_under_an_estimator_of_its_own_is_named(kwargs, sampling, metric):
    with pytest.warns(
        UserWarning, match=f"scale_rewards=.* does not change the advantages of advantage_estimator='{sampling}'"
    ) as caught:
        make(**kwargs)
    message = next(str(w.message) for w in caught if "scale_rewards" in str(w.message))
    assert ("frac_reward_zero_std" in message) == metric


@pytest.mark.parametrize(
    "field_name, value",
    [("loss_type", "a_newer_trl_loss"), ("scale_rewards", "a_newer_scaling"), ("importance_sampling_level", "block")],
)
def test_trls_enumerated_fields_are_left_to_trl(field_name, value):
    """GRPOTrainer refuses an unknown value of its own fields; a value a newer TRL adds must not be refused by a copy
    of an older TRL's list here."""
    assert getattr(make(multiround_adaptive_downsampling=False, **{field_name: value}), field_name) == value


def test_defaults_and_the_paper_settings_warn_of_nothing():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        make()
        make(reinforce_ada_choice="positive_focused", round_repeat=16, max_rounds=2)
        make(sampling_budget=6.0, prompt_memory=True, budget_top_up=1)
        make(reinforce_ada_est=True, num_generations=8, per_device_train_batch_size=16, est_exponent=1.0)
        make(multiround_adaptive_downsampling=False, dynamic_sampling=True, scale_rewards="batch")  # DAPO: TRL's
        make(global_stat_est=False, scale_rewards="none")  # the kept group's own statistics: TRL's


@pytest.mark.parametrize(
    "switch, name",
    [
        ({"multiround_adaptive_downsampling": False}, "grpo"),
        ({"multiround_adaptive_downsampling": False, "dynamic_sampling": True}, "dapo"),
        ({"reinforce_ada_est": True, "num_generations": 8, "per_device_train_batch_size": 16}, "est"),
        ({"sampling_budget": 6.0}, "budget"),
    ],
)
def test_an_older_switch_still_selects_its_sampler_with_a_future_warning(switch, name):
    """The switches the selector replaced are honoured, as TRL honours a deprecated value, and say what to write."""
    ours = rf"is deprecated and will be removed: set sampler='{name}' instead"
    with pytest.warns(FutureWarning, match=ours):
        assert make(**switch).sampler == name
    import re
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # a transformers release may warn of its own fields
        warnings.simplefilter("always")
        kept = {k: v for k, v in switch.items() if k in ("num_generations", "per_device_train_batch_size")}
        own = {"sampling_budget": 6.0} if name == "budget" else {}  # the budget's own setting, not a switch
        assert make(sampler=name, **kept, **own).sampler == name
    assert not [w for w in caught if re.search(ours, str(w.message))]


class RemembersPassRates:
    """A sampler of the user's that reads the prompt memory (its `sample` is never called here)."""

    uses_prompt_memory = True

    def __init__(self, args):
        self.args = args

    def sample(self, context, target): ...


class Forgets(RemembersPassRates):
    uses_prompt_memory = False


def test_the_selected_samplers_class_turns_the_prompt_memory_on():
    """`uses_prompt_memory` on the sampler's class decides, whatever its name: the built-ins that read the memory, a
    sampler of the user's that says so, and not one that says otherwise."""
    for sampler in ("knapsack", "est", "tests.test_config.RemembersPassRates"):
        assert make(sampler=sampler).prompt_memory is True, sampler
    for sampler in ("reinforce_ada", "budget", "retire_solved", "tests.test_config.Forgets"):
        assert make(sampler=sampler).prompt_memory is False, sampler
    assert make(sampler="tests.test_config.Forgets", prompt_memory=True).prompt_memory is True  # as the user sets it


def test_sampler_kwargs_are_parsed_from_json_as_trl_parses_its_dict_fields():
    """TRL's parser also reads the values' strings as numbers and bools, as the command line gives them."""
    args = make(sampler="knapsack", sampler_kwargs='{"min_samples": "2", "max_samples": 32}')
    assert args.sampler_kwargs == {"min_samples": 2, "max_samples": 32}
    assert make(sampler="knapsack", sampler_kwargs={"max_samples": 32}).sampler_kwargs == {"max_samples": 32}
