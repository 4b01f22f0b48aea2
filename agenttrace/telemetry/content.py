"""Opt-in content capture: prompts, outputs, tool arguments and results on spans.

Off by default. On when `ContentPolicy(enabled=True)` is given (`agenttrace.configure(
capture_content=True)`) or when the standard `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
variable says so (`true`, `1`, `span_only`, `span_and_event`; `event_only` means "not on spans"
and so stays off here: agenttrace records content on spans only).

Captured text follows the GenAI conventions (`gen_ai.input.messages`, `gen_ai.output.messages`
as JSON of `{role, parts: [...]}`; `gen_ai.tool.call.arguments` / `.result` on tool spans) and
always passes through `ContentPolicy.clean`: every configured pattern is replaced by a marker
(by default API keys and tokens of the common providers, AWS secrets, Stripe keys, JWTs, PEM
private keys, passwords in URLs and `password=...` pairs, card numbers and e-mail addresses),
then each string is capped at `max_chars`. The cap applies per string, so the JSON around it
stays valid. In structured values a key that names a secret (`password`, `api_key`, `token`, ...)
has its whole value redacted, whatever it looks like.

Content is often JSON inside JSON: a tool result that is a JSON string whose values hold JSON
again, each level escaped once more (`{\\"password\\": \\"...\\"}`, `\\\\\\"`, `\\u0022`). So a string
that parses as JSON is redacted as the structure it is (keys and all, at every level of strings
that parse in turn), and so is each JSON object or array inside other text (prose around a
tool's answer, a quoted escaped document in a log line); what changed is written back as compact
JSON, what did not is left as written. The patterns then run over text that is not JSON; their
`key: "value"` rule takes a quote at any level of escaping (`"`, `\\"`, `\\\\\\"`, `\\u0022`) and
replaces only what lies between the value's two quotes, so an escaped document stays valid.

Error texts are content too: a tool's error or an exception's message may quote anything. Span
status messages therefore come from `describe_error` / `status_text`: with capture off they say
the error's kind and where ("2 schema errors at arguments.unit, arguments.city",
`ModelMistake.summary`) and no value; with capture on they are the message, cleaned like the rest.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from agenttrace import semconv as sc
from agenttrace.errors import ModelMistake
from agenttrace.telemetry.messages import chat_input_messages, chat_output_messages  # (where they were)

__all__ = [
    "CONTENT_ENV",
    "DEFAULT_REDACTIONS",
    "ContentPolicy",
    "chat_input_messages",
    "chat_output_messages",
    "content_enabled_from_env",
]

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON = {"true", "1", "yes", "on", "span_only", "span_and_event"}
DEFAULT_MAX_CHARS = 4000

# A key naming a secret: in `key=value` text and as a mapping key. `tokens` (max_tokens,
# input_tokens) is a count, not a secret, and so are `token_count`, `token_usage`, `token_limit`.
# (`tokenizer` neither.) The word may sit inside a longer key: `aws_secret_access_key`.
_SECRET_WORD = r"(?:api[_-]?key|token(?!s|iz|_?(?:count|usage|limit))|secret|password|passwd|passphrase|pwd|credential|private[_-]?key|authorization)"
# (after `u0022`, the `\u0022` escape of a quote, the word starts too)
_SECRET_KEY = rf"(?:\b|(?<=[_\-])|(?<=u0022)){_SECRET_WORD}[A-Za-z0-9_\-]*"
_SECRET_KEY_RE = re.compile(rf"(?i){_SECRET_WORD}")
# A double quote at any level of JSON escaping: `"`, `\"`, `\\\"`, ..., or `\u0022`, `\\u0022`.
# Taken with its whole backslash run (never preceded by another backslash), so that the quote
# closing a value is the same sequence as the one opening it, at the same level.
_QUOTE = r'(?<!\\)(?:\\*"|\\+u0022)'
# Blanks between a key and its value, escaped or not (`\n` in an escaped pretty-printed document).
_GAP = r"(?:\s|\\+[nrt]){0,16}"

# (what, pattern). Key formats first, so a key inside an `api_key=...` pair is named by its kind.
DEFAULT_REDACTIONS: tuple[tuple[str, str], ...] = (
    ("private_key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)"),  # PEM
    ("api_key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic
    ("api_key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}|\bwhsec_[A-Za-z0-9]{10,}"),  # Stripe
    ("api_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id
    ("api_key", r"\b(?:ghp|gho|ghs|ghu)_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}"),
    ("api_key", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    ("api_key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google
    ("api_key", r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),
    # scheme://user:password@host: only the password
    # (lengths bounded and starts pinned so that long runs of `a.a.a...` stay linear)
    ("password", r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/@]{0,256}:(?P<value>[^\s@/]{1,256})@"),
    # `api_key=...`, `"password": "..."`, `{\"token\": \"...\"}`, `aws_secret_access_key = ...`:
    # only the value (the `value` groups). A quoted value whole, spaces included, up to the same
    # quote sequence that opened it; an unquoted one to the next break or escape (`kq`, the key's
    # quote, is put around the marker there, so that `"pin": 1234` stays JSON).
    ("secret", rf"(?i){_SECRET_KEY}(?P<kq>{_QUOTE}|')?{_GAP}[:=]{_GAP}(?:(?P<q>{_QUOTE})(?P<value_q>[^\n]{{2,2048}}?)(?<!\\)(?P=q)|'(?P<value_sq>[^']{{2,}})'|(?!(?:null|true|false)\b|\[REDACTED:)(?P<value>[^\s\"',;\\}}\]]{{4,}}))"),
    # AWS secret access key without its label: 40 characters of base64 mixing cases and digits
    # (a lowercase hex digest never matches)
    ("aws_secret", r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    ("email", r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9.\-]{1,255}\.[A-Za-z]{2,}\b"),
)
# Card numbers: 13 to 19 digits (spaces or dashes between groups allowed) starting as the card
# networks do (2-6) and passing the Luhn check, so timestamps and ids are left alone.
_CARD = re.compile(r"(?<![\d.])[2-6]\d(?:[ \-]?\d){11,17}(?![\d.])")
_CARD_MARKER = "[REDACTED:card_number]"
_SECRET_MARKER = "[REDACTED:secret]"
# Levels of JSON (objects, arrays and strings that parse as JSON in turn) redacted as structure;
# a deeper document is redacted as text by the patterns (which also see through escaping).
_MAX_JSON_DEPTH = 64
_NOT_JSON = object()
# JSON inside other text (prose around a tool's answer, a quoted escaped document in a log line)
# is redacted as structure too; a failed parse reads to the end of the text at worst, so only
# the first few are allowed and hostile text stays linear.
_SNIPPET_START = re.compile(r'[{\[]|"(?=\s*[{\[])')  # an object, an array, or a string holding one
_MAX_SNIPPET_FAILURES = 32
_DECODER = json.JSONDecoder()


class _TooDeep(Exception):
    """A document nests past _MAX_JSON_DEPTH: redact it as text instead."""


def content_enabled_from_env() -> bool:
    """Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for content on spans."""
    return os.environ.get(CONTENT_ENV, "").strip().lower() in _ON


# A compiled pattern and what replaces its matches (the marker, or a function of the match).
_Rule = tuple[re.Pattern[str], Any]


def _compile(patterns: Iterable[tuple[str, str | re.Pattern[str]] | str | re.Pattern[str]]) -> tuple[_Rule, ...]:
    out = []
    for p in patterns:
        label, pat = p if isinstance(p, tuple) else ("redacted", p)
        pattern = pat if isinstance(pat, re.Pattern) else re.compile(pat)
        marker = f"[REDACTED:{label}]"
        groups = [g for g in pattern.groupindex if g.startswith("value")]
        if groups:  # (made once here: redaction runs on every string of every content attribute)
            out.append((pattern, lambda m, mk=marker, gs=groups: _replace_groups(m, gs, mk)))
        else:
            out.append((pattern, marker))
    return tuple(out)


@dataclass(frozen=True)
class ContentPolicy:
    """Whether content is recorded, what is redacted from it and how long each string may be.

    enabled: None reads the standard variable (at construction). redact: extra patterns, each a
    regex (string or compiled) or a `(label, regex)` pair; they are applied after the defaults
    unless `default_redactions=False`. A match becomes `[REDACTED:<label>]`.
    """

    enabled: bool | None = None
    redact: Sequence[tuple[str, str | re.Pattern[str]] | str | re.Pattern[str]] = ()
    max_chars: int = DEFAULT_MAX_CHARS
    default_redactions: bool = True
    _patterns: tuple[_Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.enabled is None:
            object.__setattr__(self, "enabled", content_enabled_from_env())
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {self.max_chars}")
        base = DEFAULT_REDACTIONS if self.default_redactions else ()
        object.__setattr__(self, "_patterns", _compile((*base, *self.redact)))

    def redact_text(self, text: str) -> str:
        """Every match of every pattern replaced by `[REDACTED:<label>]` (for a pattern with
        groups named `value...`, only those groups); with the default redactions, card numbers
        that pass the Luhn check too."""
        for pattern, replacement in self._patterns:
            text = pattern.sub(replacement, text)
        if self.default_redactions:
            text = _CARD.sub(_card_replacement, text)
        return text

    def clean(self, text: str) -> str:
        """Redact, then cap at `max_chars` (the cut is marked with how much was dropped). A text
        that is a JSON document is redacted as its structure, at every level of JSON held in its
        strings, and written back (compact) only when something was redacted."""
        text = self._redact_string(text, 0)
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + f"...[{len(text) - self.max_chars} more characters]"
        return text

    def clean_value(self, value: Any) -> Any:
        """`clean` applied to every string inside nested lists and mappings (keys included); the
        value of a key that names a secret (`password`, `api_key`, `token`, ...) is redacted
        whole, and an integer that is a card number too."""
        if isinstance(value, str):
            return self.clean(value)
        if isinstance(value, Mapping):
            return {self.clean(str(k)): self._clean_entry(str(k), v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.clean_value(v) for v in value]
        return self._scalar(value)

    def _clean_entry(self, key: str, value: Any) -> Any:
        return _SECRET_MARKER if self._secret_entry(key, value) else self.clean_value(value)

    def _secret_entry(self, key: str, value: Any) -> bool:
        empty = value is None or isinstance(value, bool) or (isinstance(value, str) and not value)
        return self.default_redactions and not empty and bool(_SECRET_KEY_RE.search(key))

    def _scalar(self, value: Any) -> Any:
        if self.default_redactions and isinstance(value, int) and not isinstance(value, bool) and 10**12 <= value < 10**19:
            return _CARD_MARKER if _CARD.fullmatch(str(value)) and _luhn(str(value)) else value
        return value

    def _redact_string(self, text: str, depth: int) -> str:
        # JSON text is redacted as what it holds: a key names a secret whatever the escaping
        # around it, and what is written back is valid JSON again (the patterns alone can only
        # guess where an escaped value ends). Anything else goes through the patterns.
        if depth >= _MAX_JSON_DEPTH or not (self._patterns or self.default_redactions):
            return self.redact_text(text)
        if text.lstrip()[:1] in ("{", "[", '"'):
            try:
                tree = json.loads(text)
            except (ValueError, RecursionError):  # not JSON (or an integer past the digit limit), too deep
                tree = _NOT_JSON
            if tree is not _NOT_JSON:
                try:
                    cleaned = self._redact_tree(tree, depth + 1)
                except _TooDeep:
                    pass
                else:
                    return text if cleaned == tree else json.dumps(cleaned, ensure_ascii=False)
        return self._redact_snippets(text, depth) if _SNIPPET_START.search(text) else self.redact_text(text)

    def _redact_snippets(self, text: str, depth: int) -> str:
        """`text` with each JSON object, array or string literal in it redacted as structure (a
        secret-named key's value whole, a string's own JSON), then the patterns over all of it
        (a `password: "..."` pair may straddle a snippet's edge; the patterns leave what the
        structure pass wrote as it is)."""
        out: list[str] = []
        pos = covered = failures = 0
        for start in _SNIPPET_START.finditer(text):
            i = start.start()
            if i < covered:
                continue  # inside a snippet already read
            try:
                tree, end = _DECODER.raw_decode(text, i)
                cleaned = self._redact_tree(tree, depth + 1)
            except (ValueError, RecursionError, _TooDeep):
                failures += 1
                if failures == _MAX_SNIPPET_FAILURES:
                    break
                continue
            covered = end
            if cleaned != tree:
                out += [text[pos:i], json.dumps(cleaned, ensure_ascii=False)]
                pos = end
        out.append(text[pos:])
        return self.redact_text("".join(out))

    def _redact_tree(self, value: Any, depth: int) -> Any:
        """A parsed JSON value redacted like `clean_value`, its strings through `_redact_string`
        (uncapped: the text holding them is capped as a whole). _TooDeep past the depth limit."""
        if depth > _MAX_JSON_DEPTH:
            raise _TooDeep
        if isinstance(value, str):
            return self._redact_string(value, depth)
        if isinstance(value, dict):
            return {self._redact_string(k, depth): _SECRET_MARKER if self._secret_entry(k, v) else self._redact_tree(v, depth + 1)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self._redact_tree(v, depth + 1) for v in value]
        return self._scalar(value)

    # -- error texts -------------------------------------------------------------------------
    def describe_error(self, exc: BaseException) -> str:
        """The status message of a span `exc` failed. Capture off: the error's kind and where,
        no values (a model mistake's `summary`, another exception's type name). Capture on: its
        message (else its type name), redacted and capped like any content."""
        if self.enabled:
            try:
                text = str(exc)
            except Exception:  # an exception whose __str__ fails still ends its span
                text = ""
            return self.clean(text or type(exc).__name__)
        summary = exc.summary if isinstance(exc, ModelMistake) else type(exc).__name__
        return self.clean(summary)  # a summary holds no values; redacting it is a second guard

    def status_text(self, message: str | None, summary: str) -> str:
        """A status message given as text (a caller's `reason`, a list of validation errors):
        `message` cleaned when capture is on, else `summary`, which must hold no values."""
        if self.enabled and message:
            return self.clean(message)
        return self.clean(summary)

    def to_json(self, value: Any) -> str:
        """Cleaned JSON of `value` (strings cleaned individually, so the JSON stays valid)."""
        return json.dumps(self.clean_value(value), ensure_ascii=False, default=str)

    # -- recording ---------------------------------------------------------------------------
    def record_messages(self, span: Span, inputs: Sequence[Mapping[str, Any]] | None, outputs: Sequence[Mapping[str, Any]] | None) -> None:
        """`gen_ai.input.messages` / `gen_ai.output.messages`, when enabled."""
        if not self.enabled:
            return
        if inputs is not None:
            span.set_attribute(sc.GEN_AI_INPUT_MESSAGES, self.to_json(list(inputs)))
        if outputs is not None:
            span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, self.to_json(list(outputs)))

    def record_tool_call(self, span: Span, arguments: Any = None, result: Any = None) -> None:
        """`gen_ai.tool.call.arguments` / `.result` on a tool span, when enabled."""
        if not self.enabled:
            return
        if arguments is not None:
            span.set_attribute(sc.GEN_AI_TOOL_CALL_ARGUMENTS, self._as_text(arguments))
        if result is not None:
            span.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, self._as_text(result))

    def _as_text(self, value: Any) -> str:
        return self.clean(value) if isinstance(value, str) else self.to_json(value)


def _replace_groups(match: re.Match[str], groups: Sequence[str], marker: str) -> str:
    whole, offset = match.group(0), match.start()
    for group in groups:  # in a pattern of alternatives, the one group that matched
        start, end = match.span(group)
        if start >= 0:
            quote = match.groupdict().get("kq") if group == "value" else None
            if quote and quote != "'":  # an unquoted value after a quoted key: the marker quoted alike
                marker = quote + marker + quote
            return whole[: start - offset] + marker + whole[end - offset :]
    return marker


def _card_replacement(match: re.Match[str]) -> str:
    return _CARD_MARKER if _luhn(match.group(0)) else match.group(0)


def _luhn(text: str) -> bool:
    digits = [int(c) for c in text if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# A policy with capture off, for span-ending code given no policy: no values in status messages.
CONTENT_OFF = ContentPolicy(enabled=False)
