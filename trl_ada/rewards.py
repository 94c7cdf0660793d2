"""The reference math reward: 1.0 when the last ``\\boxed{...}`` of a completion matches the gold answer, else 0.0.

Matching is Reinforce-Ada's (its verl ``math_verify.compute_score``): the content of the last ``\\boxed{`` (braces
matched, surrounding spaces stripped) and the gold answer are both wrapped as ``\\boxed{...}``; math-verify parses the
gold with `LatexExtractionConfig`, the prediction with `ExprExtractionConfig` then `LatexExtractionConfig`, and
`math_verify.verify` decides. No box, an unclosed last box, an empty box, an error or a timeout gives 0.0.

Use it as any TRL reward function; the gold answer comes from the dataset column `answer`, `gt` or `solution`:

    >>> from trl_ada.rewards import boxed_math_reward
    >>> boxed_math_reward(["So $x = \\\\boxed{\\\\frac{1}{2}}$.", "\\\\boxed{0.5}", "\\\\boxed{3}", "no box"],
    ...                   answer=["0.5", "\\\\frac12", "2", "2"])
    [1.0, 1.0, 0.0, 0.0]

Scoring runs in a small pool of worker processes, each item under a deadline, so a pathological answer (say
``\\boxed{9^{9^{9^{9}}}}``, which sympy would happily evaluate for hours) costs one deadline and a worker restart,
never the batch. Settings, read at each call:

- ``TRL_ADA_REWARD_WORKERS``: worker processes (default ``min(4, os.cpu_count())``);
- ``TRL_ADA_REWARD_TIMEOUT``: seconds per item (default 5); an item past it scores 0.0 and its worker is killed.

Workers are POSIX processes (Linux, macOS). `verify_answer` scores one completion in-process without any deadline.

Why a pool of our own (`_Pool` below) and not a maintained one, checked against Python 3.11 and math-verify 0.9:

- math-verify's own timeouts are ``signal.alarm``: refused outside the main thread (TRL runs async reward functions
  on its event-loop thread), and a signal handler runs only between bytecodes, so one long C-level step (a huge
  integer power) is not cut.
- ``concurrent.futures.ProcessPoolExecutor`` and ``multiprocessing.Pool`` cannot stop one task: a result past its
  timeout leaves its worker computing (``Future.cancel()`` refuses a running call), and the only stop is ending every
  worker at once (``Pool.terminate()``; ``ProcessPoolExecutor.kill_workers()`` from Python 3.14), which loses the
  other workers' items. Nor do they say when a task started (a future counts as running once it is queued for a
  worker; an ``AsyncResult`` has no such state), so a per-item deadline cannot be told from time spent waiting.
- Their workers come from the trainer: ``fork`` copies a process that holds CUDA, vLLM and tokenizer threads (a lock
  held by another thread stays held in the child; Python 3.12 warns of it), while ``spawn`` and ``forkserver`` run the
  training script's ``__main__`` again in each worker (a TRL script that trains at top level, as TRL's quickstart
  does, would start again) and import `trl_ada`, with torch and transformers, to unpickle the task.

So each worker is a fresh interpreter that runs this file alone, one item at a time, killed and replaced on its own
when its item passes the deadline.
"""

from __future__ import annotations

import atexit
import collections
import functools
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from decimal import Decimal
from multiprocessing.connection import Connection, wait

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify


__all__ = [
    "boxed_math_reward",
    "check_gold_answers",
    "extract_last_boxed",
    "extract_last_number",
    "last_number_reward",
    "shutdown_reward_pool",
    "verify_answer",
]

BOX = "\\boxed{"
MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0.0 without being parsed: no real answer is that long
GOLD_COLUMNS = ("answer", "gt", "solution")  # boxed_math_reward's keyword arguments, looked up in this order

WORKERS_ENV = "TRL_ADA_REWARD_WORKERS"
TIMEOUT_ENV = "TRL_ADA_REWARD_TIMEOUT"
DEFAULT_TIMEOUT_S = 5.0

# Outcome of one item, as counted in the metrics.
OK, NO_BOX, TOO_LONG, ERROR, TIMEOUT, BAD_GOLD = "ok", "no_box", "too_long", "error", "timeout", "bad_gold"

_GOLD_CONFIG = (LatexExtractionConfig(),)
_PRED_CONFIG = (ExprExtractionConfig(), LatexExtractionConfig())


# --- Extraction -------------------------------------------------------------------------------------------------

_BRACES = re.compile(r"[{}]")


def extract_last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in `text`, nested braces matched; None if there is none.

    As in the reference, only the last ``\\boxed{`` counts (the final answer is what is graded): when it is never
    closed the result is None even if an earlier box is complete. Every brace counts, escaped ones too.
    ``\\boxed 5`` (no brace) is not a box, as in the reference.
    """
    start = text.rfind(BOX)
    if start < 0:
        return None
    body = start + len(BOX)
    depth = 1
    for brace in _BRACES.finditer(text, body):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[body : brace.start()]
    return None


def _boxed_prediction(text: str) -> tuple[str | None, str]:
    """(the stripped last boxed answer, OK), or (None, why the completion is not graded)."""
    start = text.rfind(BOX)
    if start < 0:
        return None, NO_BOX
    # Look no further than the longest answer we grade, so a megabyte of braces costs as little as a short answer.
    window = text[start : start + len(BOX) + MAX_ANSWER_CHARS + 1]
    answer = extract_last_boxed(window)
    if answer is None:
        return None, TOO_LONG if len(text) - start > len(window) else NO_BOX
    answer = answer.strip()
    return (answer, OK) if answer else (None, NO_BOX)  # an empty box is no answer, as in the reference


def _completion_text(completion) -> str:
    """The text to grade: a plain string, or the content of the last message of a conversational completion."""
    if isinstance(completion, (list, tuple)):
        completion = completion[-1] if completion else ""
    if isinstance(completion, dict):
        completion = completion.get("content", "")
    if isinstance(completion, list):  # multimodal content: a list of parts
        completion = "".join(part.get("text") or "" for part in completion if isinstance(part, dict))
    return completion if isinstance(completion, str) else ""


# --- Scoring one item (in-process, no deadline) -----------------------------------------------------------------
# math-verify's own timeouts use signal.alarm, which fails outside the main thread and cannot stop a long C-level
# sympy computation anyway; they are disabled here, and the pool's deadline (killing the worker) replaces them.


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple:
    # A prompt's samples share one gold answer: parse it once per process.
    return tuple(parse(BOX + gold + "}", extraction_config=_GOLD_CONFIG, parsing_timeout=None))


def _score(answer: str, gold: str) -> tuple[float, str]:
    """(reward, OK | ERROR | BAD_GOLD) of a boxed answer against a gold answer; math-verify's reference semantics."""
    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return 0.0, BAD_GOLD
    # raise_on_error only makes math-verify's swallowed exceptions visible (to count them); catching them per
    # (gold, prediction) pair below gives exactly verify()'s any-pair-matches result.
    try:
        pred_parsed = parse(
            BOX + answer + "}", extraction_config=_PRED_CONFIG, parsing_timeout=None, raise_on_error=True
        )
    except Exception:
        return 0.0, ERROR
    status = OK
    for gold_item in gold_parsed:
        for pred_item in pred_parsed:
            try:
                if verify(gold_item, pred_item, timeout_seconds=None, raise_on_error=True):
                    return 1.0, OK
            except Exception:
                status = ERROR
    return 0.0, status


def _gold_text(gold) -> str:
    return "" if gold is None else str(gold)


def _bad_gold_error(gold, where: str) -> ValueError:
    return ValueError(
        f"The gold answer {where}, {gold!r}, cannot be parsed by math-verify (as \\boxed{{...}}): the reward would "
        f"always be 0 for it. Fix or drop it; check_gold_answers(dataset['answer']) lists every such row."
    )


def verify_answer(completion_text: str, gold: str) -> float:
    """The reward of one completion text, computed in this process with no deadline (a hung sympy call hangs it).

    Raises ValueError when math-verify cannot parse `gold`.
    """
    gold = _gold_text(gold)
    if not _parse_gold(gold):
        raise _bad_gold_error(gold, "given")
    answer, _ = _boxed_prediction(_completion_text(completion_text))
    return 0.0 if answer is None else _score(answer, gold)[0]


# --- Worker processes -------------------------------------------------------------------------------------------
# A worker is a fresh interpreter that runs this file by path. Not `import trl_ada.rewards`, which would import the
# package and with it torch and transformers (seconds and hundreds of MB per worker), and not multiprocessing's
# spawn or forkserver, which also re-import the training script's __main__. Each worker can be killed on its own:
# the only reliable way to stop a hung sympy call.

_WORKER_NAME = "__trl_ada_reward_worker__"
_WORKER_BOOT = f"import runpy, sys; runpy.run_path(sys.argv[1], run_name={_WORKER_NAME!r})"
_READY = "ready"
_BOOT_TIMEOUT_S = 60.0  # a worker needs ~0.4 s to import math-verify and warm up; this is for loaded hosts
_MAX_BOOT_FAILURES = 3
_WORKER_MEMORY_BYTES = 4 << 30  # a worker uses ~100 MB; the cap turns a runaway allocation into an error


def _set_soft_limit(which: int, value: int, tighten_only: bool = False) -> None:
    """Set a worker's soft resource limit, within the hard one. Best effort: these limits are backstops only."""
    import resource

    try:
        soft, hard = resource.getrlimit(which)
        if tighten_only and soft != resource.RLIM_INFINITY and soft <= value:
            return
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, hard))
    except (ValueError, OSError):
        pass


def _serve(fd: int) -> None:
    """Worker main loop: answer (kind, payload, deadline) tasks with (reward, status) until the pool hangs up."""
    import resource

    _set_soft_limit(resource.RLIMIT_CORE, 0, tighten_only=True)  # SIGXCPU below would otherwise dump core
    _set_soft_limit(resource.RLIMIT_AS, _WORKER_MEMORY_BYTES, tighten_only=True)
    # math-verify warns that its own timeouts are off and the caller must enforce one: the pool does.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    conn = Connection(fd)
    _score("1", "1")  # warm up (lazy imports, regex and parser construction) before taking deadlines
    conn.send(_READY)
    while True:
        try:
            kind, payload, deadline = conn.recv()
        except (EOFError, ConnectionResetError):  # the pool hung up (a process that exits may reset the socket)
            return
        # Backstop for an orphan: if the pool itself dies, nobody kills a hung worker, so the CPU limit does.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _set_soft_limit(resource.RLIMIT_CPU, int(usage.ru_utime + usage.ru_stime + 2 * deadline + 5))
        try:
            if kind == "score":
                reply = _score(*payload)
            else:  # "gold"
                reply = (0.0, OK if _parse_gold(payload) else BAD_GOLD)
        except Exception:
            reply = (0.0, ERROR)
        conn.send(reply)


class _Worker:
    def __init__(self):
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_BOOT, os.path.abspath(__file__), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C goes to the trainer, which then shuts the pool down
            )
        self.conn = Connection(ours.detach())
        self.ready = False
        self.started = time.monotonic()

    def kill(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.wait()


class _Pool:
    """Workers scoring one batch at a time (a lock serialises callers), each item under its own deadline."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.workers = [_Worker() for _ in range(size)]
        self.boot_failures = 0

    def run(self, tasks: list[tuple[str, object]], timeout: float) -> list[tuple[float, str]]:
        """Results of `tasks` ((kind, payload) pairs), in order; an item past `timeout` seconds gives (0.0, TIMEOUT)."""
        with self.lock:
            if not self.workers:
                raise RuntimeError("trl_ada.rewards: the reward pool was shut down during this call.")
            results: list[tuple[float, str] | None] = [None] * len(tasks)
            todo = collections.deque(range(len(tasks)))
            busy: dict[int, tuple[int, float]] = {}  # worker slot -> (task index, dispatch time)
            try:
                while todo or busy:
                    self._dispatch(tasks, todo, busy, timeout)
                    self._collect(results, todo, busy, timeout)
            finally:
                for slot in list(busy):  # interrupted: the in-flight answers must not reach the next call
                    self._replace(slot)
            return results

    def _dispatch(self, tasks, todo, busy, timeout) -> None:
        for slot, worker in enumerate(self.workers):
            if not todo:
                return
            if worker.ready and slot not in busy:
                index = todo.popleft()
                try:
                    worker.conn.send((*tasks[index], timeout))
                except OSError:  # died while idle: give the task to someone else
                    todo.appendleft(index)
                    self._replace(slot)
                    continue
                busy[slot] = (index, time.monotonic())

    def _collect(self, results, todo, busy, timeout) -> None:
        now = time.monotonic()
        waiting = {w.conn: slot for slot, w in enumerate(self.workers) if slot in busy or not w.ready}
        due = [started + timeout for _, started in busy.values()]
        due += [w.started + _BOOT_TIMEOUT_S for w in self.workers if not w.ready]
        for conn in wait(list(waiting), timeout=max(0.0, min(due) - now)):
            slot = waiting[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died: a crash on this item, or at start-up
                if slot in busy:
                    results[busy.pop(slot)[0]] = (0.0, ERROR)
                else:
                    self._boot_failed()
                self._replace(slot)
                continue
            if slot in busy:
                results[busy.pop(slot)[0]] = message
            else:
                self.workers[slot].ready = True
                self.boot_failures = 0
        now = time.monotonic()
        for slot, (index, started) in list(busy.items()):
            if now - started >= timeout:
                results[index] = (0.0, TIMEOUT)
                del busy[slot]
                self._replace(slot)
        for slot, worker in enumerate(self.workers):
            if not worker.ready and now - worker.started >= _BOOT_TIMEOUT_S:
                self._boot_failed()
                self._replace(slot)

    def _boot_failed(self) -> None:
        self.boot_failures += 1
        if self.boot_failures >= _MAX_BOOT_FAILURES:
            raise RuntimeError(
                f"trl_ada.rewards: reward worker processes keep failing to start ({sys.executable} running "
                f"{os.path.abspath(__file__)}); their error output is above."
            )

    def _replace(self, slot: int) -> None:
        self.workers[slot].kill()
        self.workers[slot] = _Worker()  # starts now, in parallel with the rest of the batch

    def close(self) -> None:
        with self.lock:
            for worker in self.workers:
                worker.kill()
            self.workers = []


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _positive_env(name: str, default: float, cast) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name} must be a positive number, got {raw!r}.")
    return value


def _pool() -> _Pool:
    global _POOL
    size = _positive_env(WORKERS_ENV, min(4, os.cpu_count() or 1), int)
    with _POOL_LOCK:
        # A forked child inherits the parent's pool object but must not talk to its workers.
        if _POOL is None or _POOL.pid != os.getpid() or _POOL.size != size:
            if _POOL is not None and _POOL.pid == os.getpid():
                _POOL.close()
            _POOL = _Pool(size)
        return _POOL


def shutdown_reward_pool() -> None:
    """Stop the worker processes (they restart on the next call). Runs at interpreter exit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None


atexit.register(shutdown_reward_pool)


# --- Public entry points ----------------------------------------------------------------------------------------

_KNOWN_GOOD_GOLDS: set[str] = set()  # parsed fine already: rows without an answer to grade need no gold check


def boxed_math_reward(completions, answer=None, gt=None, solution=None, **kwargs) -> list[float]:
    """TRL reward function: 1.0 per completion whose last ``\\boxed{}`` matches its gold answer, else 0.0.

    `completions` are strings or conversational message lists (the last message is graded). The gold answers are
    the first present of the dataset columns `answer`, `gt`, `solution` (TRL passes every column as a keyword
    argument); the column must hold the final answer itself (``"\\frac{1}{2}"``), not a worked solution.

    Never raises for a completion: errors and timeouts (``TRL_ADA_REWARD_TIMEOUT`` seconds) score 0.0. Raises
    ValueError when no gold column is given or a gold answer cannot be parsed (a data error). When TRL passes
    `log_metric`, logs per call `rewards/boxed_math/timeouts`, `errors` and `too_long` (counts) and `no_box` (the
    fraction of completions without a usable box).
    """
    golds = next((column for column in (answer, gt, solution) if column is not None), None)
    if golds is None:
        raise ValueError(
            f"boxed_math_reward needs the gold answers: add a column named {' or '.join(map(repr, GOLD_COLUMNS))} to "
            f"the dataset (TRL passes every dataset column to reward functions), or pass answer=[...] when calling it."
        )
    completions, golds = list(completions), [_gold_text(g) for g in golds]
    if len(golds) != len(completions):
        raise ValueError(f"boxed_math_reward got {len(completions)} completions but {len(golds)} gold answers.")
    if not completions:
        return []
    timeout = _positive_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, float)

    rewards = [0.0] * len(completions)
    outcomes = collections.Counter()
    tasks, task_rows = [], []
    for row, (completion, gold) in enumerate(zip(completions, golds)):
        prediction, outcome = _boxed_prediction(_completion_text(completion))
        if prediction is None:
            outcomes[outcome] += 1
        else:
            tasks.append(("score", (prediction, gold)))
            task_rows.append(row)
    # A bad gold answer is a data error even in rows with nothing to grade, so those golds are checked too.
    graded = {golds[row] for row in task_rows}
    unchecked = sorted({g for g in golds if g not in graded and g not in _KNOWN_GOOD_GOLDS})
    tasks += [("gold", g) for g in unchecked]

    results = _pool().run(tasks, timeout) if tasks else []
    bad_golds = set()
    for (kind, payload), (reward, status) in zip(tasks, results):
        gold = payload[1] if kind == "score" else payload
        if status == BAD_GOLD:
            bad_golds.add(gold)
        elif status == OK:
            _remember_good_gold(gold)
    if bad_golds:
        row = next(i for i, g in enumerate(golds) if g in bad_golds)
        raise _bad_gold_error(golds[row], f"of row {row} in this batch")
    for row, (reward, status) in zip(task_rows, results):
        rewards[row] = reward
        outcomes[status] += 1

    log_metric = kwargs.get("log_metric")
    if log_metric is not None:
        log_metric("rewards/boxed_math/timeouts", float(outcomes[TIMEOUT]))
        log_metric("rewards/boxed_math/errors", float(outcomes[ERROR]))
        log_metric("rewards/boxed_math/too_long", float(outcomes[TOO_LONG]))
        log_metric("rewards/boxed_math/no_box", outcomes[NO_BOX] / len(completions))
    return rewards


def _remember_good_gold(gold: str) -> None:
    if len(_KNOWN_GOOD_GOLDS) > 100_000:  # bounded memory over a long run
        _KNOWN_GOOD_GOLDS.clear()
    _KNOWN_GOOD_GOLDS.add(gold)


def check_gold_answers(answers) -> None:
    """Raise ValueError naming the first dataset row whose gold answer math-verify cannot parse (or parse in time).

    Run it when loading a dataset so a bad row fails before training starts. Distinct answers are parsed in the
    reward worker pool, in parallel.
    """
    golds = [_gold_text(g) for g in answers]
    distinct = sorted(set(golds))
    if not distinct:
        return
    results = _pool().run([("gold", g) for g in distinct], _positive_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, float))
    bad = {g: status for g, (_, status) in zip(distinct, results) if status != OK}
    for g in distinct:
        if g not in bad:
            _remember_good_gold(g)
    if bad:
        rows = [i for i, g in enumerate(golds) if g in bad]
        first = golds[rows[0]]
        why = "timed out while parsing" if bad[first] == TIMEOUT else "cannot be parsed by math-verify"
        raise ValueError(
            f"The gold answer of dataset row {rows[0]}, {first!r}, {why} (as \\boxed{{...}}); {len(rows)} row(s) "
            f"in all have unusable gold answers, the first ones: {rows[:10]}. Fix or drop those rows."
        )


# --- A lenient numeric reward (chat arithmetic) ------------------------------------------------------------------
# Small chat models answer "What is 7 + 5?" in prose ("7 + 5 = 12.", "The answer is **12**", "\(\boxed{12}\)"), not
# in a \boxed{}: the reference reward would score nearly all of it 0. This one grades the last number of the text.
# Pure Python on a linear-time regular expression: no sympy, so no worker pool and nothing that can hang; math-verify
# would only help for symbolic answers, which this reward does not take (boxed_math_reward does).

# A number: an optional sign (only where it cannot be a binary minus, e.g. not in "10-3"), digits with optional
# thousands separators ("12,345"; "1,2" is two numbers), an optional decimal part ("5.0"; a sentence's full stop in
# "is 5." is not one).
_NUMBER = re.compile(r"(?:(?<![\w)\]}])[-+\u2212])?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?", re.ASCII)


def extract_last_number(text: str) -> Decimal | None:
    """The value of the last number in `text`, or None if it holds none.

    >>> extract_last_number("7 + 5 = 12. So the answer is $\\\\boxed{12}$.")
    Decimal('12')
    >>> extract_last_number("a total of 1,234.50 dollars!") == extract_last_number("-x: 1234.5")
    True
    """
    last = None
    for last in _NUMBER.finditer(text):
        pass
    if last is None:
        return None
    return Decimal(last.group().replace(",", "").replace("\u2212", "-"))


def _gold_number(gold, row: int) -> Decimal:
    match = _NUMBER.fullmatch(str(gold).strip()) if gold is not None else None
    if match is None:
        raise ValueError(
            f"last_number_reward: the gold answer of row {row} in this batch, {gold!r}, is not a number (like '12', "
            f"'-3', '1,234' or '2.5'). Fix the dataset row, or use boxed_math_reward for symbolic answers."
        )
    return Decimal(match.group().replace(",", "").replace("\u2212", "-"))


def last_number_reward(completions, answer=None, gt=None, solution=None, **kwargs) -> list[float]:
    """TRL reward function: 1.0 per completion whose last number equals its gold answer numerically, else 0.0.

    Lenient on form: "12", "12.0", "+12", "**12**.", "\\\\boxed{12}", "12 apples" all match the gold "12"; thousands
    separators are read ("1,234" is 1234). Strict on the value: the last number counts, whatever comes before it
    ("12, no wait, 13" is 13). The gold answers come from the column `answer`, `gt` or `solution`, as for
    `boxed_math_reward`, and must be plain numbers: any other gold raises ValueError naming the row. Never raises
    for a completion. When TRL passes `log_metric`, logs `rewards/last_number/no_number` (the fraction of completions
    without any number).

    >>> last_number_reward(["7 + 5 = 12.", "It is 12.0", "\\\\(\\\\boxed{13}\\\\)", "twelve"], answer=["12"] * 4)
    [1.0, 1.0, 0.0, 0.0]
    """
    golds = next((column for column in (answer, gt, solution) if column is not None), None)
    if golds is None:
        raise ValueError(
            f"last_number_reward needs the gold answers: add a column named {' or '.join(map(repr, GOLD_COLUMNS))} to "
            f"the dataset (TRL passes every dataset column to reward functions), or pass answer=[...] when calling it."
        )
    completions, golds = list(completions), list(golds)
    if len(golds) != len(completions):
        raise ValueError(f"last_number_reward got {len(completions)} completions but {len(golds)} gold answers.")
    values = [_gold_number(gold, row) for row, gold in enumerate(golds)]  # a data error fails before any scoring
    predictions = [extract_last_number(_completion_text(completion)) for completion in completions]
    log_metric = kwargs.get("log_metric")
    if log_metric is not None and completions:
        log_metric("rewards/last_number/no_number", sum(p is None for p in predictions) / len(completions))
    return [1.0 if predicted == gold else 0.0 for predicted, gold in zip(predictions, values)]


if __name__ == _WORKER_NAME:
    _serve(int(sys.argv[2]))
