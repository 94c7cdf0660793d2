"""The algorithm, pure Python: no torch, no TRL, nothing above this package.

- `sampling`: Reinforce-Ada's rounds, exit rules (`positive_focused`, `balanced`), pool selection and fallback;
  also the simulation API (`run_adaptive_sampling`).
- `advantages`: the pooled advantage (the whole pool's statistics) and the other estimators.
- `est`: Reinforce-Ada-Est, allocation of N_x from remembered pass rates and its advantage.
- `budget`: budgeted sampling (skip predicted-uniform prompts, top up within a cap).
- `dynamic`: DAPO's dynamic sampling (drop groups without signal, refill).
- `memory`: the prompt memory (a decayed Beta posterior per prompt) and the group prior.
- `pipelined`: the barrier-free rounds' driver (prompts retire as their samples finish).
"""
