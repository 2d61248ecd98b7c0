"""Scorers (Mastra's agent ``scorers``): functions or LLM judges that score a
finished run's input and output, each with a sampling rate. The notification-scheduler runs them
after the run ended, off its critical path (:mod:`threadline.flows.scoring`, decision 71).

Agent option shape (Mastra's)::

    scorers={
        "length": {"scorer": lambda run: min(1.0, len(run.output) / 100), "sampling": 1.0},
        "polite": {"scorer": judge(model="openai/gpt-4o-mini", instructions="Rate politeness."),
                   "sampling": {"type": "ratio", "rate": 0.5}},
    }

or a (plain or async) function of the request context returning that mapping. A scorer is a
plain or ``async`` function ``(run: ScorerRun) -> float | {"score": float, "reason": str?}``,
or a :class:`Judge`. ``sampling``: a rate in ``[0, 1]``, ``{"type": "ratio", "rate": r}``,
``{"type": "none"}`` (never) or absent (always).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from threadline._internal.usercode import call_user
from threadline.errors import ConfigurationError
from threadline.runtime.message_types import DBMessage


@dataclass(frozen=True, slots=True)
class ScorerRun:
    """What a scorer scores: one finished run."""

    run_id: str
    agent_id: str
    resource_id: str
    thread_id: str
    input: list[DBMessage]
    """The run's input messages (``MastraDBMessage`` dicts, source ``input``)."""
    output: str
    """The run's answer text."""
    request_context: dict[str, object] = field(default_factory=dict)

    @property
    def input_text(self) -> str:
        """The input messages' text, one per line."""
        from threadline.runtime.messages import text_of

        return "\n".join(text_of(m) for m in self.input)


DEFAULT_JUDGE_INSTRUCTIONS = "You are an expert evaluator of an AI agent's answers."


@dataclass(frozen=True, slots=True)
class Judge:
    """An LLM judge: asks ``model`` (through litellm) to score the run.

    The prompt is ``prompt(run)`` (default: the input and the output); the model is asked to
    answer ``{"score": number in [0, 1], "reason": "..."}`` (a bare number is taken too).
    """

    model: str
    instructions: str = DEFAULT_JUDGE_INSTRUCTIONS
    prompt: Callable[[ScorerRun], str] | None = None


def judge(*, model: str, instructions: str | None = None, prompt: Callable[[ScorerRun], str] | None = None) -> Judge:
    """An LLM judge scorer (see :class:`Judge`)."""
    return Judge(model=model, instructions=instructions or DEFAULT_JUDGE_INSTRUCTIONS, prompt=prompt)


@dataclass(frozen=True, slots=True)
class ScorerEntry:
    """One configured scorer: its name, the scorer and its sampling rate."""

    name: str
    scorer: Callable[..., object] | Judge
    rate: float


def _rate(sampling: object, where: str) -> float:
    if sampling is None:
        return 1.0
    if isinstance(sampling, Mapping):
        kind = sampling.get("type", "ratio")
        if kind == "none":
            return 0.0
        if kind != "ratio":
            raise ConfigurationError(f"{where}: sampling type must be 'ratio' or 'none', got {kind!r}")
        sampling = sampling.get("rate")
    if isinstance(sampling, bool) or not isinstance(sampling, int | float) or not 0 <= sampling <= 1:
        raise ConfigurationError(f"{where}: sampling rate must be a number in [0, 1], got {sampling!r}")
    return float(sampling)


def scorer_entries(scorers: object, agent_id: str) -> list[ScorerEntry]:
    """``{name: {scorer, sampling}}`` (or ``{name: scorer}``) as entries, in order.

    Raises:
        ConfigurationError: not a mapping, a scorer that is neither a function nor a :class:`Judge`,
            a bad sampling rate.
    """
    if scorers is None:
        return []
    if not isinstance(scorers, Mapping):
        raise ConfigurationError(f"agent {agent_id}: scorers must be a mapping name -> {{scorer, sampling}}")
    out = []
    for name, entry in scorers.items():
        where = f"agent {agent_id}: scorer {name!r}"
        if isinstance(entry, Mapping):
            scorer, rate = entry.get("scorer"), _rate(entry.get("sampling"), where)
        else:
            scorer, rate = entry, 1.0
        if not isinstance(scorer, Judge) and not callable(scorer):
            raise ConfigurationError(f"{where}: a scorer is a function of the run or a judge(...)")
        out.append(ScorerEntry(str(name), scorer, rate))
    return out


def sampled(run_id: str, name: str, rate: float) -> bool:
    """Whether the scorer ``name`` scores run ``run_id`` at ``rate``: a pure function of both
    (a redelivered ``run_finished`` decides the same way)."""
    if rate >= 1:
        return True
    if rate <= 0:
        return False
    digest = hashlib.sha256(f"{run_id}\x00{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def score_of(value: object) -> tuple[float, str | None]:
    """A scorer's return value as ``(score, reason)``.

    Raises:
        ValueError: not a number nor ``{"score": number, "reason"?}``.
    """
    if isinstance(value, Mapping):
        reason = value.get("reason")
        value = value.get("score")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value), None if reason is None else str(reason)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return float(value), None
    raise ValueError(f"a scorer returns a number or {{'score': number, 'reason': str}}, got {value!r}")


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_judge_answer(text: str) -> tuple[float, str | None]:
    """A judge's answer (``{"score", "reason"}`` JSON, possibly inside other text, or a number).

    Raises:
        ValueError: no score in the answer.
    """
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            return score_of(json.loads(text[start:end + 1]))
        except (ValueError, json.JSONDecodeError):
            pass
    found = _NUMBER.search(text)
    if found is None:
        raise ValueError(f"the judge's answer has no score: {text[:200]!r}")
    return float(found.group()), None


def judge_messages(j: Judge, run: ScorerRun) -> list[dict[str, str]]:
    """The judge's chat messages for ``run``."""
    body = j.prompt(run) if j.prompt else f"Input:\n{run.input_text}\n\nOutput:\n{run.output}"
    return [{"role": "system", "content": j.instructions},
            {"role": "user", "content": f"{body}\n\nAnswer only with JSON: "
                                        '{"score": <a number from 0 to 1>, "reason": "<one sentence>"}'}]


async def run_scorer(entry: ScorerEntry, run: ScorerRun, *, api_base: str | None,
                     timeout_s: float) -> tuple[float, str | None]:
    """Score ``run`` with ``entry``'s scorer: call the function (plain ones off the event loop)
    or ask the judge through ``litellm.acompletion``.

    Raises:
        ModelCallError: the judge's model call failed (classified as the worker's calls are).
        ValueError: the scorer returned no score.
        Exception: whatever a scorer function raises.
    """
    if not isinstance(entry.scorer, Judge):
        return score_of(await call_user(entry.scorer, run))
    import litellm

    from threadline.runtime.model.llm import call_kwargs, classify

    kwargs = call_kwargs(entry.scorer.model, api_base=api_base, timeout_s=timeout_s)
    try:
        response = await litellm.acompletion(**kwargs, messages=judge_messages(entry.scorer, run), stream=False)
    except Exception as exc:
        raise classify(exc) from exc
    return parse_judge_answer(response.choices[0].message.content or "")
