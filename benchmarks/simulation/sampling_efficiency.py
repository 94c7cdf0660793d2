"""Sampling efficiency of Reinforce-Ada vs GRPO and DAPO-style filtering, with a simulated policy (no model).

Each prompt has a pass rate p drawn from a distribution; a sample's reward is Bernoulli(p) (0 or 1). For every
method we measure, per prompt of the training batch:

- cost: generated samples per prompt;
- signal: the share of prompts whose kept group gives a non-zero gradient (a mixed group for GRPO and DAPO,
  non-zero pooled advantages for Reinforce-Ada);
- signal per 1000 generated samples (signal prompts / samples * 1000): how much useful gradient a unit of
  generation buys;
- for Reinforce-Ada: the share of prompts that never met the exit rule within max_rounds.

Reinforce-Ada runs through the package's own `trl_ada.core.sampling.run_adaptive_sampling` and
`trl_ada.core.advantages.pooled_advantages`, so the numbers measure the code that trains, not a re-implementation.

Section 4 is a multi-epoch simulation over a FIXED prompt set whose pass rates drift upward between epochs (the
policy learns), where memory across steps can pay: GRPO n=4, DAPO dynamic sampling (`trl_ada.core.dynamic`),
Reinforce-Ada pos/balance, and the budgeted mode at 4 samples per trained prompt with and without prompt memory
(`trl_ada.core.budget`, `trl_ada.core.memory`, `trl_ada.integration.refill`: the trainer's own code). It reports signal per 1000 samples
per epoch and the share of samples spent on prompts with true p < 0.05 or > 0.95, and writes
benchmarks/simulation/sampling_budget.png.

    python benchmarks/simulation/sampling_efficiency.py                     # 10,000 prompts, ~20 s on 2 CPU cores
    python benchmarks/simulation/sampling_efficiency.py --num-prompts 2000  # quick look

Prints markdown tables and writes benchmarks/simulation/sampling_efficiency.png.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import zlib
from pathlib import Path

import matplotlib


matplotlib.use("Agg")  # headless: the figure goes to a file
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from trl_ada.cli.plotting import save  # noqa: E402
from trl_ada.core.advantages import pooled_advantages  # noqa: E402
from trl_ada.core.budget import run_budgeted_sampling  # noqa: E402
from trl_ada.core.dynamic import fill_with_signal  # noqa: E402
from trl_ada.core.est import allocate, est_advantages  # noqa: E402
from trl_ada.core.memory import PromptMemory  # noqa: E402
from trl_ada.core.sampling import EliminationRule, PromptResult, run_adaptive_sampling  # noqa: E402
from trl_ada.integration.refill import PromptStream  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-prompts", type=int, default=10_000, help="simulated prompts per distribution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=512, help="DAPO: kept prompts per training batch")
    parser.add_argument(
        "--dapo-max-gen-batches", type=int, default=10, help="DAPO: generation batches per step at most"
    )
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("sampling_efficiency.png"))
    parser.add_argument("--epoch-prompts", type=int, default=2000, help="multi-epoch: size of the fixed prompt set")
    parser.add_argument("--epochs", type=int, default=6, help="multi-epoch: passes over the prompt set")
    parser.add_argument("--step-prompts", type=int, default=64, help="multi-epoch: trained prompts per step")
    parser.add_argument("--drift", type=float, default=0.3, help="multi-epoch: mean logit gain per epoch")
    parser.add_argument("--budget-output", type=Path, default=Path(__file__).with_name("sampling_budget.png"))
    return parser.parse_args(argv)


# Reference settings (docs/algorithm.md): n=4, M=8, R=4, threshold 0.7.
N = 4
ROUND_REPEAT = 8
MAX_ROUNDS = 4
THRESHOLD = 0.7

# The calibration targets: "a model with 35.3% all-correct groups at n=4 has only 10.2% at n=256".
TARGET_ALL_CORRECT = {4: 0.353, 256: 0.102}


def rng_for(seed: int, *keys: str) -> np.random.Generator:
    """One independent, named random stream per (distribution, method): adding a method never shifts another's."""
    return np.random.default_rng([seed, *(zlib.crc32(k.encode()) for k in keys)])


# ---------------------------------------------------------------------------------------------------------------
# 1. Pass-rate distributions
# ---------------------------------------------------------------------------------------------------------------


def beta_moment(a: float, b: float, n: int) -> float:
    """E[p^n] for p ~ Beta(a, b) = B(a+n, b) / B(a, b): the chance that a group of n is all correct."""
    return math.exp(math.lgamma(a + n) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(a + b + n))


def bisect(f, lo: float, hi: float, iters: int = 200) -> float:
    """Root of an increasing function on [lo, hi] (scipy is not a dependency)."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def fit_calibrated_beta() -> tuple[float, float]:
    """Beta(a, b) with E[p^4] = 0.353 and E[p^256] = 0.102: two equations, two unknowns.

    For a fixed b, E[p^4] increases with a, so the first equation gives a(b). Along that curve, E[p^256] falls as
    b grows (less mass piled right at p=1), so a second bisection on b meets the second target. Both in log space.
    """

    def a_of(b: float) -> float:
        return math.exp(bisect(lambda la: beta_moment(math.exp(la), b, 4) - TARGET_ALL_CORRECT[4], -10, 10))

    def gap_256(log_b: float) -> float:
        b = math.exp(log_b)
        return TARGET_ALL_CORRECT[256] - beta_moment(a_of(b), b, 256)  # increasing in b

    b = math.exp(bisect(gap_256, math.log(1e-3), math.log(1e2), iters=100))
    return a_of(b), b


def sample_hard(rng: np.random.Generator, size: int) -> np.ndarray:
    """A hard-prompt set, like the reference's "hard" data (1-2 correct of 16 from the base model, p ~ 1/16-1/8).

    40% unsolvable for the current policy (p = 0), 50% rarely solved (p ~ Uniform(0, 1/8)), and 10% easier
    (p ~ Uniform(1/8, 1/2)), because a real hard set always holds some prompts the model has since learned.
    """
    kind = rng.choice(3, size=size, p=[0.4, 0.5, 0.1])
    return np.where(kind == 0, 0.0, np.where(kind == 1, rng.uniform(0, 1 / 8, size), rng.uniform(1 / 8, 1 / 2, size)))


# ---------------------------------------------------------------------------------------------------------------
# 2. Methods. Each returns (total generated samples, prompts in the training batch, prompts with signal, extra)
# ---------------------------------------------------------------------------------------------------------------


def bernoulli(rng: np.random.Generator, p: np.ndarray, k: int) -> np.ndarray:
    """k 0/1 rewards for each pass rate in p, shape (len(p), k)."""
    return (rng.random((len(p), k)) < p[:, None]).astype(np.float64)


def is_mixed(rewards: np.ndarray) -> np.ndarray:
    """A group carries GRPO signal iff its rewards are not all equal."""
    return rewards.min(axis=1) != rewards.max(axis=1)


def grpo(p: np.ndarray, n: int, rng: np.random.Generator) -> dict:
    signal = is_mixed(bernoulli(rng, p, n))
    closed_form = np.mean(1 - p**n - (1 - p) ** n)  # E[1 - p^n - (1-p)^n] over the same p's
    return dict(
        samples=n * len(p),
        prompts=len(p),
        signal=int(signal.sum()),
        wasted=n * int((~signal).sum()),
        closed_form=float(closed_form),
    )


def dapo(sample_p, batch_size: int, max_gen_batches: int, steps: int, rng: np.random.Generator) -> dict:
    """DAPO's dynamic sampling: draw generation batches of `batch_size` fresh prompts with n=4, keep the mixed
    groups, repeat until `batch_size` prompts are kept, then trim the surplus (its samples are wasted, as in verl).

    verl raises an error when `max_gen_batches` is reached; here the step trains on the partial batch and we count
    it. Prompts come fresh from the distribution (`sample_p`): DAPO consumes more data than it trains on.
    """
    samples = kept_total = mixed_total = drawn = capped = gen_batches = 0
    for _ in range(steps):
        kept = 0
        for attempt in range(max_gen_batches):
            p = sample_p(rng, batch_size)
            drawn += batch_size
            samples += N * batch_size
            gen_batches += 1
            kept += int(is_mixed(bernoulli(rng, p, N)).sum())
            if kept >= batch_size:
                break
        capped += kept < batch_size
        mixed_total += kept
        kept_total += min(kept, batch_size)  # surplus mixed groups are trimmed away
    # Every kept prompt has signal; the training batch holds kept_total prompts.
    return dict(
        samples=samples,
        prompts=kept_total,
        signal=kept_total,
        wasted=samples - N * kept_total,  # uniform groups and the trimmed surplus
        no_trim_cost=samples / mixed_total,  # per kept prompt if the surplus were not thrown away
        drawn=drawn,
        steps=steps,
        capped=capped,
        gen_batches=gen_batches / steps,
    )


def reinforce_ada(p: np.ndarray, choice: str, round_repeat: int, max_rounds: int, rng: np.random.Generator) -> dict:
    def sample_round(active: list[int], k: int) -> list[list[float]]:
        # One vectorised draw per round for all active prompts; lists are what the pure-Python API iterates fastest.
        return bernoulli(rng, p[active], k).tolist()

    rule = EliminationRule(N, round_repeat, max_rounds, choice, THRESHOLD)
    results = run_adaptive_sampling(len(p), sample_round, rule)
    # Signal = the trainer's actual advantages (pooled baseline) are not all zero.
    has_signal = [
        any(a != 0.0 for a in pooled_advantages(r.selected_rewards, r.pool_rewards, THRESHOLD)) for r in results
    ]
    return dict(
        samples=sum(len(r.pool_rewards) for r in results),
        prompts=len(p),
        signal=sum(has_signal),
        wasted=sum(len(r.pool_rewards) for r, s in zip(results, has_signal) if not s),
        unfinished=sum(not r.finished for r in results),
    )


def sequential_limit(p: np.ndarray, choice: str, cap: int, rng: np.random.Generator) -> dict:
    """An oracle that draws one sample at a time and stops the moment the exit rule holds: no round overshoot.

    It draws at least n (it still has to fill a group of n) and at most `cap` = R*M, the same budget as the rounds.
    Signal = its pool is mixed at the stop, exactly Reinforce-Ada's pooled-advantage criterion for 0/1 rewards.
    """
    draws = bernoulli(rng, p, cap)
    num_pos = np.cumsum(draws, axis=1)
    num_neg = np.arange(1, cap + 1) - num_pos
    if choice == "balanced":
        met = (num_pos >= N // 2) & (num_neg >= N - N // 2)
    else:
        met = num_pos >= 1
    met[:, : N - 1] = False  # fewer than n samples cannot make a group
    finished = met.any(axis=1)
    stop = np.where(finished, met.argmax(axis=1), cap - 1)  # index of the last sample drawn
    rows = np.arange(len(p))
    mixed = (num_pos[rows, stop] > 0) & (num_neg[rows, stop] > 0)
    return dict(
        samples=int((stop + 1).sum()),
        prompts=len(p),
        signal=int(mixed.sum()),
        wasted=int((stop + 1)[~mixed].sum()),
        unfinished=int((~finished).sum()),
    )


# ---------------------------------------------------------------------------------------------------------------
# 3. Reporting
# ---------------------------------------------------------------------------------------------------------------


def per_prompt(row: dict) -> tuple[float, float, float]:
    cost = row["samples"] / row["prompts"]
    share = row["signal"] / row["prompts"]
    return cost, share, 1000 * row["signal"] / row["samples"]


def fmt_unfinished(row: dict) -> str:
    return f"{row['unfinished'] / row['prompts']:.1%}" if "unfinished" in row else "-"


def print_main_table(name: str, rows: dict[str, dict]) -> None:
    print(f"\n#### {name}: cost vs signal\n")
    print(
        "| method | samples / prompt | prompts with signal | never finished | signal / 1000 samples "
        "| samples spent on no-signal groups |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, row in rows.items():
        cost, share, per_1000 = per_prompt(row)
        wasted = row["wasted"] / row["samples"]
        print(f"| {label} | {cost:.2f} | {share:.1%} | {fmt_unfinished(row)} | {per_1000:.1f} | {wasted:.1%} |")


# ---------------------------------------------------------------------------------------------------------------
# 4. Several epochs over a fixed prompt set: where memory across steps pays
# ---------------------------------------------------------------------------------------------------------------

SKIP_DECAY = 0.9  # AdaGRPOConfig.budget_skip_decay's default
EPOCH_METHODS = (
    "GRPO n=4",
    "DAPO n=4",
    "Ada positive_focused",
    "Ada balanced",
    "budget 4, memory",
    "budget 4, no memory",
    "Est n=4",
)


def multi_epoch(method: str, p0: np.ndarray, args, seed: int) -> list[dict]:
    """One run over `args.epochs` passes of the fixed prompt set; per epoch: samples, prompts with signal, samples
    spent on extreme prompts (true p < 0.05 or > 0.95), and how many of the intermediate prompts were trained.

    Steps walk the set in a fresh random order each epoch (TRL's sampler); DAPO and the budget draw replacements
    from a `PromptStream` over the same set; the budget remembers prompts in a `PromptMemory`, both exactly as the
    trainer does. Between epochs each pass rate moves up by a random logit step N(drift, drift).
    """
    rng = rng_for(seed, "epochs", method)
    p = p0.copy()
    drift = rng.normal(args.drift, args.drift, len(p))
    memory, stream = PromptMemory(), PromptStream(len(p), seed)
    est_memory = PromptMemory(0.9, 1.0, 16.0)  # Est's estimator with AdaGRPOConfig(sampler="est")'s defaults
    g = args.step_prompts
    coin = np.random.default_rng([seed, 7])

    def sample_round(prompts: list[int], k: int) -> list[list[float]]:
        return bernoulli(rng, p[prompts], k).tolist() if prompts else []

    one_round_of_n = EliminationRule(N, round_repeat=N, max_rounds=1)

    def plain(prompts: list[int]):  # n i.i.d. samples each, kept whole (GRPO's group)
        return run_adaptive_sampling(
            len(prompts), lambda active, k: sample_round([prompts[i] for i in active], k), one_round_of_n
        )

    epochs = []
    trained_after_first: set[int] = set()
    for epoch in range(args.epochs):
        samples = signal = extreme = trained = 0
        trained_mid = set()
        order = rng.permutation(len(p)).tolist()
        for start in range(0, len(order) - g + 1, g):
            batch = order[start : start + g]
            if method in ("GRPO n=4", "DAPO n=4"):
                cap = args.dapo_max_gen_batches if method.startswith("DAPO") else 0
                filled = fill_with_signal(batch, stream.draw, plain, g, cap)
                sampled = [(h, r) for h, r in filled.sampled]
                chosen = [filled.sampled[i] for i in filled.chosen]
            elif method.startswith("Est"):  # N_x from the remembered pass rates, all trained (trl_ada.core.est)
                counts = allocate([est_memory.pass_rate(h) for h in batch], N * g)
                pools = [sample_round([h], c)[0] for h, c in zip(batch, counts)]
                est_memory.update(batch, counts, [sum(x > THRESHOLD for x in pool) for pool in pools], step=epoch)
                results = [
                    PromptResult(pool_rewards=pool, selected=list(range(len(pool))), rounds=1, finished=True)
                    for pool in pools
                ]
                sampled = chosen = list(zip(batch, results))
            elif method.startswith("Ada"):
                choice = method.split()[1]
                rule = EliminationRule(N, ROUND_REPEAT, MAX_ROUNDS, choice, THRESHOLD)
                results = run_adaptive_sampling(g, lambda active, k: sample_round([batch[i] for i in active], k), rule)
                sampled = chosen = list(zip(batch, results))
            else:
                remembered = method.endswith(", memory")
                candidates = list(batch)  # handles are positions here: a prompt drawn twice is two candidates

                def draw(k: int) -> list[int]:
                    candidates.extend(stream.draw(k))
                    return list(range(len(candidates) - k, len(candidates)))

                budgeted = run_budgeted_sampling(
                    list(range(g)),
                    draw,
                    lambda h: memory.posterior(candidates[h]) if remembered else (1.0, 1.0, 0),
                    lambda h: float(coin.random()),
                    lambda hs, k: sample_round([candidates[h] for h in hs], k),
                    target=g,
                    budget=4 * g,
                    num_generations=N,
                    positive_threshold=THRESHOLD,
                )
                sampled = chosen = [(candidates[h], r) for h, r in budgeted.sampled]
                memory.forget([candidates[h] for h in budgeted.skipped], SKIP_DECAY)  # as the trainer does
            for h, r in sampled:
                samples += len(r.pool_rewards)
                extreme += len(r.pool_rewards) * bool(p[h] < 0.05 or p[h] > 0.95)
            for h, r in chosen:
                trained += 1
                advantages = (
                    est_advantages(r.pool_rewards)
                    if method.startswith("Est")
                    else pooled_advantages(r.selected_rewards, r.pool_rewards, THRESHOLD)
                )
                if any(a != 0.0 for a in advantages):
                    signal += 1
                if 0.2 <= p[h] <= 0.8:
                    trained_mid.add(h)
                if epoch > 0:
                    trained_after_first.add(h)
            memory.update(
                [h for h, _ in sampled],
                [len(r.pool_rewards) for _, r in sampled],
                [sum(x > THRESHOLD for x in r.pool_rewards) for _, r in sampled],
                step=epoch,
            )
        mid = int(((p >= 0.2) & (p <= 0.8)).sum())
        epochs.append(
            dict(
                samples=samples,
                signal=signal,
                trained=trained,
                extreme=extreme,
                mid_trained=len(trained_mid) / max(mid, 1),
            )
        )
        if epoch == args.epochs - 1:  # starvation: intermediate at the end, yet never trained after epoch 1
            final_mid = np.flatnonzero((p >= 0.2) & (p <= 0.8)).tolist()
            epochs[-1]["mid_never"] = sum(h not in trained_after_first for h in final_mid) / max(len(final_mid), 1)
        logit = np.log(np.clip(p, 1e-9, 1 - 1e-9) / np.clip(1 - p, 1e-9, 1))
        p = np.where(p <= 0, 0.0, 1 / (1 + np.exp(-(logit + drift))))  # p = 0 stays unsolvable
    return epochs


def print_multi_epoch(runs: dict[str, list[dict]]) -> None:
    epochs = len(next(iter(runs.values())))
    grpo = runs["GRPO n=4"]
    print("\n#### Signal per 1000 generated samples, per epoch (fixed prompt set, pass rates drifting upward)\n")
    print(
        "| method | " + " | ".join(f"epoch {e + 1}" for e in range(epochs)) + " | epochs 2+ vs GRPO n=4 "
        "| samples / trained prompt | samples on p<0.05 or >0.95 | intermediate prompts trained per epoch "
        "| intermediate prompts never trained after epoch 1 |"
    )
    print("|---|" + "---:|" * (epochs + 5))
    for method, rows in runs.items():
        per_1000 = [1000 * r["signal"] / r["samples"] for r in rows]
        later = sum(r["signal"] for r in rows[1:]) / sum(r["samples"] for r in rows[1:])
        grpo_later = sum(r["signal"] for r in grpo[1:]) / sum(r["samples"] for r in grpo[1:])
        cost = sum(r["samples"] for r in rows) / sum(r["trained"] for r in rows)
        extreme = sum(r["extreme"] for r in rows[1:]) / sum(r["samples"] for r in rows[1:])
        mid = min(r["mid_trained"] for r in rows[1:])
        print(
            f"| {method} | "
            + " | ".join(f"{x:.1f}" for x in per_1000)
            + f" | {later / grpo_later:.2f}x | {cost:.2f} | {extreme:.1%} | {mid:.0%} (min) "
            f"| {rows[-1]['mid_never']:.1%} |"
        )


def plot_multi_epoch(runs: dict[str, list[dict]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method, rows in runs.items():
        ax.plot(range(1, len(rows) + 1), [1000 * r["signal"] / r["samples"] for r in rows], "o-", label=method)
    ax.set_xlabel("epoch over the fixed prompt set")
    ax.set_ylabel("prompts with signal per 1000 generated samples")
    ax.set_title("Several epochs, pass rates drifting upward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


def main(argv=None) -> None:
    args = parse_args(argv)
    start = time.time()

    a, b = fit_calibrated_beta()
    print("### Pass-rate distributions\n")
    print(f"calibrated: p ~ Beta(a={a:.4f}, b={b:.4f}), fitted so that E[p^n] = P(all n correct) hits the targets")
    print("| n | all correct E[p^n] | target | all wrong E[(1-p)^n] | no signal (uniform group) |")
    print("|---:|---:|---:|---:|---:|")
    for n in (4, 8, 16, 32, 256):
        ac, aw = beta_moment(a, b, n), beta_moment(b, a, n)
        target = f"{TARGET_ALL_CORRECT[n]:.3f}" if n in TARGET_ALL_CORRECT else ""
        print(f"| {n} | {ac:.3f} | {target} | {aw:.3f} | {ac + aw:.3f} |")
    print("hard: 40% p=0, 50% p~U(0, 1/8), 10% p~U(1/8, 1/2)")

    distributions = {
        "calibrated": lambda rng, size: rng.beta(a, b, size),
        "hard": sample_hard,
    }

    plot_data = {}
    for dist_name, sample_p in distributions.items():
        p = sample_p(rng_for(args.seed, dist_name, "p"), args.num_prompts)
        print(f"\n### Distribution: {dist_name} ({len(p)} prompts, mean p = {p.mean():.3f})")
        rows: dict[str, dict] = {}

        # GRPO: a fixed group of n for every prompt.
        print("\nGRPO signal share, simulated vs closed form E[1 - p^n - (1-p)^n] over the same p's:")
        for n in (4, 8, 16, 32):
            row = grpo(p, n, rng_for(args.seed, dist_name, f"grpo{n}"))
            rows[f"GRPO n={n}"] = row
            print(f"  n={n:2d}: simulated {row['signal'] / row['prompts']:.4f}, closed form {row['closed_form']:.4f}")

        # DAPO: as many training steps as it takes to train on about as many prompts as the other methods see.
        steps = max(1, round(len(p) / args.batch_size))
        rng = rng_for(args.seed, dist_name, "dapo")
        dapo_row = dapo(sample_p, args.batch_size, args.dapo_max_gen_batches, steps, rng)
        rows[f"DAPO filter n=4, B={args.batch_size}"] = dapo_row

        # Reinforce-Ada at the reference settings, then the sequential oracle at the same cap R*M.
        for choice in ("positive_focused", "balanced"):
            rng = rng_for(args.seed, dist_name, f"ada-{choice}-{ROUND_REPEAT}-{MAX_ROUNDS}")
            rows[f"Ada {choice} (M={ROUND_REPEAT}, R={MAX_ROUNDS})"] = reinforce_ada(
                p, choice, ROUND_REPEAT, MAX_ROUNDS, rng
            )
        for choice in ("positive_focused", "balanced"):
            rng = rng_for(args.seed, dist_name, f"seq-{choice}")
            rows[f"sequential limit, {choice} (cap {ROUND_REPEAT * MAX_ROUNDS})"] = sequential_limit(
                p, choice, ROUND_REPEAT * MAX_ROUNDS, rng
            )
        print_main_table(dist_name, rows)

        d = dapo_row
        print(
            f"\nDAPO detail: {d['steps']} steps of B={args.batch_size}; {d['gen_batches']:.2f} generation batches per "
            f"step (cap {args.dapo_max_gen_batches}, steps that hit it: {d['capped']}); {d['drawn']} prompts drawn "
            f"for {d['prompts']} trained ({d['prompts'] / d['drawn']:.1%} kept); {N} samples per drawn prompt, "
            f"{d['samples'] / d['prompts']:.2f} per kept prompt ({d['no_trim_cost']:.2f} if the surplus mixed groups "
            f"of the last generation batch were not trimmed away)."
        )

        # Sweep of the balanced rounds: M (samples per round) x R (rounds), with the oracle at the same cap.
        print(f"\n#### {dist_name}: balanced sweep (n={N}); oracle = sequential limit at the same cap R*M\n")
        print(
            "| M | R | cap R*M | samples / prompt | oracle samples / prompt | signal | oracle signal "
            "| never finished | signal / 1000 samples |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        sweep = []
        for m in (4, 8, 16):
            for r in (1, 2, 4, 8):
                row = reinforce_ada(p, "balanced", m, r, rng_for(args.seed, dist_name, f"ada-balanced-{m}-{r}"))
                oracle = sequential_limit(p, "balanced", m * r, rng_for(args.seed, dist_name, f"seq-balanced-{m * r}"))
                cost, share, per_1000 = per_prompt(row)
                o_cost, o_share, _ = per_prompt(oracle)
                sweep.append((cost, share))
                print(
                    f"| {m} | {r} | {m * r} | {cost:.2f} | {o_cost:.2f} | {share:.1%} | {o_share:.1%} "
                    f"| {fmt_unfinished(row)} | {per_1000:.1f} |"
                )
        plot_data[dist_name] = (rows, sweep)

    # Cost (x) against signal (y), one panel per distribution.
    fig, axes = plt.subplots(1, len(plot_data), figsize=(11, 4.8), sharey=True)
    for ax, (dist_name, (rows, sweep)) in zip(np.atleast_1d(axes), plot_data.items()):
        xs, ys = zip(*sweep)
        ax.scatter(xs, ys, s=14, c="lightgray", label="Ada balanced sweep (M, R)", zorder=1)
        grpo_pts = [per_prompt(row)[:2] for label, row in rows.items() if label.startswith("GRPO")]
        ax.plot(*zip(*grpo_pts), "o-", color="tab:blue", label="GRPO n=4, 8, 16, 32", zorder=2)
        # Filled markers: what runs; hollow markers: the sequential limit of the same exit rule.
        styles = {
            "DAPO": ("s", "tab:green", True),
            "Ada positive": ("^", "tab:orange", True),
            "Ada balanced": ("D", "tab:red", True),
            "sequential limit, positive": ("^", "tab:orange", False),
            "sequential limit, balanced": ("D", "tab:red", False),
        }
        for label, row in rows.items():
            for prefix, (marker, color, filled) in styles.items():
                if label.startswith(prefix):
                    ax.scatter(
                        *per_prompt(row)[:2],
                        marker=marker,
                        s=60,
                        facecolors=color if filled else "none",
                        edgecolors=color,
                        label=label,
                        zorder=3,
                    )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("generated samples per prompt (log2)")
        ax.set_title(f"{dist_name} pass rates")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of prompts with signal")
    # One shared legend under the panels, so it hides no point.
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(args.output, dpi=100)
    print(f"\nwrote {args.output} ({time.time() - start:.0f} s)")

    print(
        f"\n### Several epochs over a fixed set of {args.epoch_prompts} prompts (calibrated Beta at the start, "
        f"logit drift N({args.drift}, {args.drift}) per epoch, {args.step_prompts} trained prompts per step)"
    )
    p0 = rng_for(args.seed, "epochs", "p").beta(a, b, args.epoch_prompts)
    runs = {method: multi_epoch(method, p0, args, args.seed) for method in EPOCH_METHODS}
    print_multi_epoch(runs)
    plot_multi_epoch(runs, args.budget_output)
    print(f"\nwrote {args.budget_output} ({time.time() - start:.0f} s)")
    # The numbers behind both plots, beside them: per distribution each method's row and the balanced sweep's
    # (samples per prompt, share with signal) points; per method the multi-epoch run.
    data = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "distributions": {name: {"rows": rows, "sweep": sweep} for name, (rows, sweep) in plot_data.items()},
        "epochs": runs,
    }
    data_path = args.output.with_suffix(".json")
    data_path.write_text(json.dumps(data, indent=1, default=_plain) + "\n")
    print(f"wrote {data_path}")


def _plain(value):
    """numpy values and arrays as JSON numbers and lists."""
    return value.tolist() if hasattr(value, "tolist") else float(value)


if __name__ == "__main__":
    main()
