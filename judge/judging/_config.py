"""What a judgment is asked with: :class:`JudgeConfig`, :class:`Passage`, :class:`VerdictStore`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol

from judge.backends import ChatRequest, ConfigError, Message
from judge.io import CJK_SHARE, language_of
from judge.judging._models import Mode, PassageVerdict
from judge.judging._templates import PromptTemplate, TemplateError, default_template_id, load_template

Language = Literal["zh", "en", "auto"]
BoundLanguage = Literal["zh", "en"]
LANGUAGES: tuple[BoundLanguage, ...] = ("zh", "en")

LANGUAGE_RULE = (
    f"auto: per query, zh when >= {CJK_SHARE:.0%} of the letters (str.isalpha) of the query and its "
    "passages are CJK ideographs, else en"
)


@dataclass(frozen=True)
class JudgeConfig:
    """How passages are judged. Every field that changes a verdict is in :meth:`cache_params`.

    ``mode``: ``binary`` (yes/no) or ``graded`` (0-3; verdict yes iff grade >= ``grade_threshold``).
    ``language``: picks the built-in default template for the mode (:func:`default_template_id`,
    e.g. ``binary.zh.v2``); ``template`` overrides it with another id or a ``.toml`` path.
    ``auto`` (the default) picks ``zh`` or ``en`` once per query from its text and its
    passages' (:func:`language_of`, :data:`LANGUAGE_RULE`); :func:`bind_language` makes the
    per-query config every verdict, cache key and template of that query uses.
    ``probability``: one forward pass per passage; the verdict comes from the probabilities of
    the candidate answer tokens (needs ``backend.supports_probabilities``). ``None`` (the
    default) decides per backend: on where the backend prefers it (``prefers_probabilities``:
    the embedded model, where it is ~10x faster than generating and its threshold is the
    tuned decision rule) and the template supports it, off elsewhere:
      - binary: ``p_yes = P(yes) / (P(yes) + P(no))``, verdict yes iff ``p_yes >= p_yes_threshold``,
        ``confidence`` = P of the chosen verdict. ``p_yes_threshold=None`` (the default)
        takes the template's calibrated threshold (tuned against human labels, see
        docs/agreement.md), or 0.5 if it has none;
      - graded: P("0".."3") renormalised (``probs``), ``expected_grade`` = sum g*P(g),
        ``grade`` = argmax (ties go to the lower grade), verdict yes iff
        ``grade >= grade_threshold``, ``p_yes`` = P(grade >= grade_threshold) and ``confidence``
        = P of the chosen verdict (``p_yes`` or ``1 - p_yes``).
      The reason is empty unless ``explain`` is set: then a second, short generation is asked
      to explain the verdict already chosen (the reply is prefilled with it). ``explain=None``
      (the default) explains exactly when probability mode was chosen automatically, so the
      default job always records a Chinese reason, and ``probability=True`` stays the fast
      path.
    ``samples``: > 1 asks each passage that many times (seed, seed+1, ...) and takes the
    majority: binary ties go to "no"; graded takes the most frequent grade (ties to the lower
    grade). ``confidence`` is the share of judged samples agreeing with the final verdict,
    ``p_yes`` the share of yes, ``expected_grade`` the mean grade. Not combinable with
    ``probability`` (which already yields a distribution).
    ``max_reasks``: invalid replies are re-asked this many times (with the parse error
    appended to the conversation) before the passage is recorded as unjudged.

    An invalid setting raises :class:`~judge.backends.ConfigError` (a ValueError) whose
    ``field`` is the attribute's name.
    """

    mode: Mode = "binary"
    language: Language = "auto"
    probability: bool | None = None
    p_yes_threshold: float | None = None
    grade_threshold: int = 2
    max_reasks: int = 2
    samples: int = 1
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = 42
    max_tokens: int = 256
    template: str | None = None
    explain: bool | None = None

    def __post_init__(self) -> None:
        def bad(field: str, message: str) -> ConfigError:
            return ConfigError(message, field=field)

        if self.mode not in ("binary", "graded"):
            raise bad("mode", f"must be 'binary' or 'graded', not {self.mode!r}")
        if self.language not in ("zh", "en", "auto"):
            raise bad("language", f"must be 'zh', 'en' or 'auto', not {self.language!r}")
        if self.p_yes_threshold is not None and not 0.0 <= self.p_yes_threshold <= 1.0:
            raise bad("p_yes_threshold", f"must be in [0, 1], not {self.p_yes_threshold}")
        if isinstance(self.grade_threshold, bool) or not isinstance(self.grade_threshold, int):
            raise bad("grade_threshold", "must be an integer 0..3")
        if not 0 <= self.grade_threshold <= 3:
            raise bad("grade_threshold", f"must be in 0..3, not {self.grade_threshold}")
        if self.max_reasks < 0:
            raise bad("max_reasks", f"must be >= 0, not {self.max_reasks}")
        if self.samples < 1:
            raise bad("samples", f"must be >= 1, not {self.samples}")
        if self.samples > 1 and self.probability is True:
            raise bad("samples", "> 1 cannot be combined with probability mode")
        if self.temperature < 0:
            raise bad("temperature", f"must be >= 0, not {self.temperature}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise bad("top_p", f"must be in (0, 1], not {self.top_p}")
        if self.max_tokens < 1:
            raise bad("max_tokens", f"must be >= 1, not {self.max_tokens}")

    def cache_params(self) -> dict[str, Any]:
        """The fields that change a stored verdict (all but ``max_reasks``: only judged
        verdicts are stored, and a valid verdict does not depend on how many re-asks were
        allowed)."""
        params = asdict(self)
        params.pop("max_reasks")
        return params

    def generation(self) -> dict[str, Any]:
        """The settings that shape a generated reply: temperature, top_p, seed, max_tokens."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
        }

    def chat_request(self, messages: Sequence[Message], **fields: Any) -> ChatRequest:
        """A call of ``messages`` under this config's :meth:`generation` settings; ``fields``
        set the request's other fields (or override those)."""
        return ChatRequest(messages=tuple(messages), **(self.generation() | fields))

    @property
    def decision_threshold(self) -> float:
        """The P(yes) threshold in force; only a resolved config (:func:`resolve_config`) has one."""
        if self.p_yes_threshold is None:
            raise ValueError("p_yes_threshold is automatic here: call resolve_config(config, backend) first")
        return self.p_yes_threshold

    def template_id(self) -> str:
        if self.template:
            return self.template
        if self.language == "auto":
            raise ConfigError(
                "language is 'auto': the template is chosen per query (bind_language)", field="language"
            )
        return default_template_id(self.mode, self.language)

    def template_ids(self) -> dict[str, str]:
        """The verdict template of each language this config may use (one for a bound or
        explicit-template config; ``zh`` and ``en`` for ``auto``)."""
        if self.language != "auto" or self.template:
            return {self.language: self.template_id()}
        return {lang: default_template_id(self.mode, lang) for lang in LANGUAGES}


def bind_language(
    config: JudgeConfig, query: str, texts: Iterable[str] = (), *, language: str | None = None
) -> JudgeConfig:
    """The config one query is judged with: ``language="auto"`` bound to ``language`` when
    given (e.g. the one recorded for the query), else to :func:`language_of` the query and
    ``texts``; a resolved config's automatic threshold then becomes that template's. Any
    other config comes back unchanged."""
    if config.language != "auto":
        return config
    lang: BoundLanguage = (
        "zh" if language == "zh" else "en" if language == "en" else language_of([query, *texts])
    )
    bound = replace(config, language=lang)
    if bound.probability is not None and bound.p_yes_threshold is None:
        bound = replace(bound, p_yes_threshold=load_template(bound.template_id()).decision_threshold)
    return bound


def resolve_config(config: JudgeConfig, backend: object) -> JudgeConfig:
    """``config`` with its automatic settings (``None``) made concrete for ``backend``.

    Every verdict, cache key and summary uses the resolved config, so an output file says
    which decision rule was actually applied."""
    probability, explain, threshold = config.probability, config.explain, config.p_yes_threshold
    auto = config.language == "auto" and not config.template
    if probability is not None and explain is not None and (threshold is not None or auto):
        return config
    templates = [load_template(t) for t in config.template_ids().values()]
    if probability is None:
        probability = (
            bool(getattr(backend, "prefers_probabilities", False))
            and bool(getattr(backend, "supports_probabilities", False))
            and all(t.supports_probability for t in templates)
            and config.samples == 1
        )
        if explain is None:
            explain = probability
    if threshold is None and not auto:
        # ``auto``: each query's template gives its threshold when the language is bound.
        threshold = templates[0].decision_threshold
    return replace(config, probability=probability, explain=bool(explain), p_yes_threshold=threshold)


def check_templates(config: JudgeConfig) -> None:
    """Fail fast on a bad template: every template ``config`` may use (both languages for
    ``auto``), checked as :func:`template_for` checks one."""
    if config.language != "auto" or config.template:
        template_for(config)
        return
    for lang in LANGUAGES:
        template_for(replace(config, language=lang))


def template_for(config: JudgeConfig) -> PromptTemplate:
    """The verdict template ``config`` asks for, checked against its mode."""
    template = load_template(config.template_id())
    if template.mode != config.mode:
        raise TemplateError(
            f"template {template.id} is a {template.mode} template but mode is {config.mode}",
            field="template",
        )
    if config.probability and not template.supports_probability:
        raise TemplateError(
            f"template {template.id} has no answer_prefix/candidates for probability mode",
            field="template",
        )
    return template


def summary_template_for(config: JudgeConfig) -> PromptTemplate:
    return load_template(default_template_id("summary", config.language))


@dataclass(frozen=True)
class Passage:
    """One retrieved passage. ``truncated`` says the text was cut before judging. ``url``:
    where it comes from (a URL, a host name or a site's name such as ``新华网``), used by
    source quality. ``query_id``: the id of the query it was retrieved for, when the caller
    knows it (datasets do); with ``id`` it travels to the backend as request metadata."""

    text: str
    id: str | None = None
    truncated: bool = False
    url: str | None = None
    query_id: str | None = None


class VerdictStore(Protocol):
    """Where verdicts are cached (e.g. :class:`judge.store.SQLiteVerdictStore`, or a dict)."""

    async def get(self, key: str) -> PassageVerdict | None: ...

    async def put(self, key: str, verdict: PassageVerdict) -> None: ...
