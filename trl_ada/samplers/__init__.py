"""Samplers: allocation rules written on one narrow protocol (`trl_ada.samplers.protocol`).

`AdaGRPOConfig(sampler=...)` selects one by its built-in name (`BUILT_IN`), by an import path `module.Class`
(importable from the current folder, as reward functions are), or, from Python, by the class itself or an instance of
it (a notebook's class needs no module); `load_sampler` builds it. docs/samplers.md: write
your own.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import sys

from trl_ada.samplers.protocol import Sampler, SamplingContext, Selection, check_advantages, check_selection


# name: (module, class). "grpo", "reinforce_ada" and "dapo" are the same rounds with different settings: the config
# maps each name onto them (AdaGRPOConfig.__post_init__).
BUILT_IN = {
    "grpo": ("trl_ada.samplers.reinforce_ada", "Rounds"),
    "reinforce_ada": ("trl_ada.samplers.reinforce_ada", "Rounds"),
    "dapo": ("trl_ada.samplers.reinforce_ada", "Rounds"),
    "budget": ("trl_ada.samplers.budget", "Budget"),
    "est": ("trl_ada.samplers.est", "Est"),
    "knapsack": ("trl_ada.samplers.knapsack", "Knapsack"),
    "retire_solved": ("trl_ada.samplers.retire_solved", "RetireSolved"),
}


# The field's cheap allocation rules as `trl-ada-compare --field` arms, GRPO n first (the baseline): (arm name,
# config overrides).
FIELD_ARMS = (
    ("grpo", ("sampler=grpo",)),
    ("balanced", ("sampler=reinforce_ada", "reinforce_ada_choice=balanced")),
    ("dapo", ("sampler=dapo",)),
    ("knapsack", ("sampler=knapsack",)),
    ("retire_solved", ("sampler=retire_solved",)),
    ("maxrl", ("sampler=grpo", "advantage_estimator=maxrl")),
)


def import_path(value: str, field: str):
    """The object `module.name` (or `module:name`) names: samplers, advantage functions, reward functions, tools and
    environments all load through here. The current folder is searched first, as `python -m` searches it, so that a
    console script finds a module the user keeps beside their recipe; a ValueError naming `field` and the fix
    otherwise."""
    if not isinstance(value, str) or not ("." in value.strip(".:") or ":" in value.strip(".:")):
        raise ValueError(f"{field}={value!r} is neither a built-in name nor an import path 'module.name'.")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        return pkgutil.resolve_name(value)
    except (ImportError, AttributeError, ValueError) as error:
        module, _, attribute = value.rpartition(":") if ":" in value else value.rpartition(".")
        raise ValueError(
            f"{field}={value!r}: cannot import {attribute!r} from {module!r} ({error}). Looked in the current folder "
            f"({here}) and the installed packages; give an import path such as '{field_stem(field)}.{attribute}' "
            f"for {field_stem(field)}.py in the current folder."
        ) from None


def field_stem(field: str) -> str:
    return "my_module" if field in ("sampler", "advantage_estimator") else "my_task"


def sampler_name(value) -> str | None:
    """A `sampler` value as text: a name as written, a class or an instance by its class's import path (what logs,
    messages and the saved config show)."""
    if value is None or isinstance(value, str):
        return value
    cls = value if isinstance(value, type) else type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_sampling(args) -> str:
    """What the kept groups are under `args`, in a few words (a plot's legend)."""
    name = sampler_name(args.sampler)
    if name != "reinforce_ada":
        return f"sampler={name!r}"
    choice = args.reinforce_ada_choice.replace("-", "_")
    return "balanced: ~50% by construction" if choice == "balanced" else choice


def sampler_class(name) -> type:
    """The class a `sampler` value names: a built-in name, `module.Class`, or the class (or an instance of it) given
    from Python, as TRL takes reward functions. Raises a ValueError naming the fix."""
    if not isinstance(name, str):
        found = name if isinstance(name, type) else type(name)
        name = sampler_name(name)
    elif name in BUILT_IN:
        found = getattr(importlib.import_module(BUILT_IN[name][0]), BUILT_IN[name][1])
    elif "." in name or ":" in name:  # module.Class, or module:Class as tools and environments take it
        found = import_path(name, "sampler")
    else:
        raise ValueError(
            f"sampler={name!r}: use one of {sorted(BUILT_IN)} or an import path 'module.Class' (a class "
            "with sample(context, target): trl_ada.samplers.protocol, docs/samplers.md)."
        )
    if not callable(getattr(found, "sample", None)):
        raise ValueError(f"sampler={name!r} has no sample(context, target) method: see trl_ada.samplers.protocol.")
    return found


def built_in_name(value) -> str | None:
    """The built-in name of a `sampler` value that is a built-in: its name, or exactly its class (the class, an
    instance, or its import path; "reinforce_ada" for the rounds), so that it gets that name's defaults and checks.
    None for anything else: a subclass is a sampler of the user's."""
    if isinstance(value, str) and value in BUILT_IN:
        return value
    cls = sampler_class(value)  # a name that is neither built in nor an import path fails here, named
    return next((name for name in ("reinforce_ada", *BUILT_IN) if cls is sampler_class(name)), None)


def check_sampler(args) -> None:
    """What `load_sampler` refuses, said when the config is built, before any model or data loads: sampler_kwargs
    that do not fit the sampler's constructor, or given with an instance. A built-in is built once here to check its
    own settings (its constructor is pure); a sampler of the user's is not built until the trainer is."""
    cls, kwargs = _constructor(args)
    if isinstance(args.sampler, str) and args.sampler in BUILT_IN:
        cls(args, **kwargs)


def load_sampler(args) -> Sampler:
    """The sampler `args.sampler` gives: an instance as it is, else its class built as `Sampler(args,
    **args.sampler_kwargs)`."""
    cls, kwargs = _constructor(args)
    return args.sampler if cls is None else cls(args, **kwargs)


def _constructor(args) -> tuple[type | None, dict]:
    """The class to build and its keyword arguments, checked to fit; (None, {}) for an instance, used as it is."""
    cls, kwargs = sampler_class(args.sampler), dict(args.sampler_kwargs or {})
    if not isinstance(args.sampler, (str, type)):  # an instance, built by the user
        if kwargs:
            raise ValueError(
                f"sampler_kwargs={kwargs!r} with a sampler instance ({sampler_name(args.sampler)}): an instance is "
                "used as it is. Pass its settings to its constructor, or pass the class with sampler_kwargs."
            )
        return None, {}
    try:
        inspect.signature(cls).bind(args, **kwargs)
    except TypeError as error:
        if not kwargs:
            raise ValueError(
                f"sampler={args.sampler_name!r} cannot be built as {cls.__name__}(args) ({error}): a sampler's __init__ "
                "takes the AdaGRPOConfig, then its sampler_kwargs (trl_ada.samplers.protocol)."
            ) from None
        raise ValueError(
            f"sampler_kwargs={kwargs!r} do not fit sampler={args.sampler_name!r} ({error}): its arguments are "
            f"{inspect.signature(cls)}."
        ) from None
    return cls, kwargs


__all__ = [
    "BUILT_IN",
    "FIELD_ARMS",
    "Sampler",
    "SamplingContext",
    "Selection",
    "built_in_name",
    "check_sampler",
    "describe_sampling",
    "check_advantages",
    "check_selection",
    "import_path",
    "load_sampler",
    "sampler_class",
    "sampler_name",
]
