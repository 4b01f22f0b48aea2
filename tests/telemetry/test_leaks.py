"""Nothing the model, the user or a tool wrote reaches the trace file unless content capture is
on, and then only redacted: prompts, arguments, results, tool errors, unknown tool names and
exceptions, every documented secret kind, scanned for in the whole file."""

from __future__ import annotations

import json

import pytest

from agenttrace import Agent, AgentConfig, FakeClock, Task, Tool, ToolError
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.content import ContentPolicy
from agenttrace.testing import ScriptedModel

# kind -> (text planted, what must not appear in the file)
SECRETS: dict[str, tuple[str, str]] = {
    "openai": ("sk-proj-Q3xv9TzLw2Rk8YbN4mHc7JdA", "Q3xv9TzLw2Rk8YbN4mHc7JdA"),
    "anthropic": ("sk-ant-api03-Zr7Kq2Wm9Xt4Lp6Nv8Bc", "Zr7Kq2Wm9Xt4Lp6Nv8Bc"),
    "aws_id": ("AKIAZ7QX3LMN5PRT2VWY", "AKIAZ7QX3LMN5PRT2VWY"),
    "aws_secret": ("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", "bPxRfiCYzQ8vLeKm3T"),
    "github": ("ghp_R8bT2nQ6wZ4yK9mV3xL7cJ5dH1fG0aS2eP4u", "R8bT2nQ6wZ4yK9mV3xL7cJ5dH1fG0aS2eP4u"),
    "slack": ("xoxb-2048-9137-Tq8Wm3Zr5Lk", "9137-Tq8Wm3Zr5Lk"),
    "google": ("AIzaSyB7x9Qm2Lk4Wz8Tr3Nv6Yc1Hd5Jf0PgXsQ", "SyB7x9Qm2Lk4Wz8Tr3Nv6Yc1Hd5Jf0PgXsQ"),
    "bearer": ("Authorization: Bearer Zk7Qw2Lx9Rm4Tv8Yb3Nc", "Zk7Qw2Lx9Rm4Tv8Yb3Nc"),
    "stripe": ("sk_live_51Hq8ZtK2wX9mR4vL7nB3cY", "51Hq8ZtK2wX9mR4vL7nB3cY"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.Wq3xT9zK2mLr8vN4bY7cJ5dH1f",
            "Wq3xT9zK2mLr8vN4bY7cJ5dH1f"),
    "pem": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpQIBAAKCAQEAcanaryKeyBody0123\n-----END RSA PRIVATE KEY-----",
            "MIIEpQIBAAKCAQEAcanaryKeyBody0123"),
    "db_url": ("postgres://app:Db9PassCanary77@db.internal:5432/app", "Db9PassCanary77"),
    "password_pair": ("password=Hunter2Canary", "Hunter2Canary"),
    "card": ("4111 1111 1111 1111", "1111 1111 1111"),
    "card_plain": ("5555555555554444", "5555555555554444"),
    "email": ("alice.canary@example.com", "alice.canary@example.com"),
}
ALL_SECRETS = " | ".join(text for text, _ in SECRETS.values())

# Not secret-shaped: with capture off none of these may appear; with it on they may.
CANARIES = {
    "prompt": "CANARY-PROMPT-31",
    "tool_name": "CANARY-TOOLNAME-32",
    "argument": "CANARY-ARG-33",
    "result": "CANARY-RESULT-34",
    "tool_error": "CANARY-TOOLERR-35",
    "exception": "CANARY-EXC-36",
    "answer": "CANARY-ANSWER-37",
    "model_error": "CANARY-MODELERR-38",
    "reason": "CANARY-REASON-39",
}
# Values under secret-naming keys: not secret-shaped, so only the key says they are secrets.
KEYED = {"password": "plainpw-keyed-41", "api_key": "plainkey-keyed-42", "token": "plaintok-keyed-43"}


def lookup_tool() -> Tool:
    def lookup(city: str, unit: str = "C", password: str = "", api_key: str = "", token: str = "") -> dict:
        if city == "fail":
            raise ToolError(f"no data ({CANARIES['tool_error']}): {ALL_SECRETS}")
        if city == "crash":
            raise RuntimeError(f"bug ({CANARIES['exception']}): {ALL_SECRETS}")
        return {"city": city, "note": f"{CANARIES['result']} {ALL_SECRETS}"}

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "unit": {"enum": ["C", "F"]},
            "password": {"type": "string"},
            "api_key": {"type": "string"},
            "token": {"type": "string"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    return Tool("lookup", "Look a city up.", schema, lookup)


def call(**arguments: object) -> str:
    return json.dumps({"tool": "lookup", "arguments": arguments})


REPLIES = [
    # step 1: an unknown tool, two schema errors quoting secrets, a tool error, a tool crash, a call
    json.dumps({"tool": f"{CANARIES['tool_name']} {ALL_SECRETS}", "arguments": {}}),
    call(city=f"{CANARIES['argument']} {ALL_SECRETS}", unit=f"kelvin {ALL_SECRETS}"),
    call(city="fail"),
    call(city="crash"),
    call(city=CANARIES["argument"], **KEYED, unit="C"),
    # step 2: an integer past Python's int-string limit, then the answer
    '{"answer": 1' + "0" * 5000 + "}",
    json.dumps({"answer": f"{CANARIES['answer']} {ALL_SECRETS}"}),
]


class FailingModel(ScriptedModel):
    """A model whose call raises an unexpected error quoting secrets."""

    def chat(self, messages, params, *, cancel=None):
        raise RuntimeError(f"backend down ({CANARIES['model_error']}): {ALL_SECRETS}")


def write_trace(tmp_path, capture: bool) -> tuple[str, list]:
    path = tmp_path / "trace.jsonl"
    clock = FakeClock()
    tel = Telemetry(clock=clock, trace_file=path, synchronous=True, content=ContentPolicy(enabled=capture))
    prompt = f"{CANARIES['prompt']} {ALL_SECRETS}"
    results = []
    agent = Agent(ScriptedModel(REPLIES, clock), [lookup_tool()], telemetry=tel,
                  config=AgentConfig(name="leaky", max_attempts=5))
    results.append(agent.run(Task(id="t1", prompt=prompt)))
    # a step that fails on a tool error: its status message is the loop's `reason` (str(exc))
    one_try = Agent(ScriptedModel([call(city="fail")], clock), [lookup_tool()], telemetry=tel,
                    config=AgentConfig(name="leaky", max_attempts=1))
    results.append(one_try.run(Task(id="t2", prompt=prompt)))
    # an exception that is not a model mistake ends every span on the way out
    broken = Agent(FailingModel([], clock), [lookup_tool()], telemetry=tel, config=AgentConfig(name="leaky"))
    with pytest.raises(RuntimeError):
        broken.run(Task(id="t3", prompt=prompt))
    # the instrumentation API: a caller's own reason and validation errors
    import agenttrace as at

    with at.agent_span("wrapped", task_id="t4", telemetry=tel):
        with at.step_span() as step:
            with at.validation_span("lookup", telemetry=tel) as v:
                v.failed([f"arguments.city: {CANARIES['argument']} {ALL_SECRETS}"], paths=["arguments.city"])
            step.set_outcome("invalid", reason=f"{CANARIES['reason']} {ALL_SECRETS}")
        with at.step_span():  # a call to a tool the model made up, checked against the given tools
            result = at.validate_tool_call(f"{CANARIES['tool_name']} {ALL_SECRETS}", {}, tools=[lookup_tool()],
                                           telemetry=tel)
            assert not result.ok and result.error_type == "unknown_tool"
    tel.shutdown()
    return path.read_text(), results


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _decoded(text: str) -> str:
    # the file's strings as written, unescaped, so a `\n` or `\/` in JSON hides nothing
    return "\n".join(s for line in text.splitlines() if line.strip() for s in _strings(json.loads(line)))


def _statuses(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out += [s.get("status", {}).get("message", "") for s in ss["spans"]]
    return [m for m in out if m]


def test_with_capture_off_nothing_reaches_the_file(tmp_path):
    text, results = write_trace(tmp_path, capture=False)
    assert results[0].outcome.value == "completed" and results[1].outcome.value == "failed"
    decoded = _decoded(text)
    for haystack in (text, decoded):
        for kind, (_, needle) in SECRETS.items():
            assert needle not in haystack, kind
        for where, canary in CANARIES.items():
            assert canary not in haystack, where
        for key, value in KEYED.items():
            assert value not in haystack, key
    statuses = _statuses(text)
    # the kind and where of each failure, no values
    assert "2 schema errors at arguments.city, arguments.unit" in statuses
    assert "unknown tool (not one of the 1 tools)" in statuses
    assert "tool 'lookup' failed (ToolError)" in statuses and "tool 'lookup' failed (RuntimeError)" in statuses
    assert "a number in the JSON has 5001 digits" in statuses
    assert "RuntimeError" in statuses  # the model's crash: its type, not its message
    assert "step 1 ended error: tool 'lookup' failed (ToolError)" in statuses
    assert "1 schema error at arguments.city" in statuses and "step 1 ended invalid" in statuses
    assert "unknown tool" in statuses and '"validate_arguments unknown_tool"' in text


def test_with_capture_on_only_redacted_content_reaches_the_file(tmp_path):
    text, _ = write_trace(tmp_path, capture=True)
    decoded = _decoded(text)
    for haystack in (text, decoded):
        for kind, (_, needle) in SECRETS.items():
            assert needle not in haystack, kind
        for key, value in KEYED.items():  # redacted by their keys
            assert value not in haystack, key
    # content is there, redacted: the prompt, the errors, the result
    assert CANARIES["prompt"] in decoded and CANARIES["result"] in decoded
    statuses = _statuses(text)
    assert any(CANARIES["tool_error"] in m and "[REDACTED:" in m for m in statuses)
    assert any(CANARIES["tool_name"] in m for m in statuses)  # the model is told, and so is the trace
    assert any(CANARIES["model_error"] in m for m in statuses)
    assert any(CANARIES["reason"] in m for m in statuses)
    for label in ("api_key", "aws_secret", "jwt", "private_key", "password", "secret", "card_number", "email"):
        assert f"[REDACTED:{label}]" in decoded, label


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_every_secret_kind_is_redacted(kind):
    planted, needle = SECRETS[kind]
    cleaned = ContentPolicy(enabled=True).clean(f"before {planted} after")
    assert needle not in cleaned and "[REDACTED:" in cleaned
    assert cleaned.startswith("before ") and cleaned.endswith(" after")


def test_structured_values_are_redacted_by_their_keys():
    policy = ContentPolicy(enabled=True)
    cleaned = policy.clean_value({"password": "plain", "API-Key": 12345, "auth": {"refresh_token": ["a", "b"]},
                                  "max_tokens": 96, "tokenizer": "gpt2", "city": "Paris", "card": 4111111111111111})
    assert cleaned == {"password": "[REDACTED:secret]", "API-Key": "[REDACTED:secret]",
                       "auth": {"refresh_token": "[REDACTED:secret]"}, "max_tokens": 96, "tokenizer": "gpt2",
                       "city": "Paris", "card": "[REDACTED:card_number]"}


def test_things_that_only_look_like_secrets_are_kept():
    policy = ContentPolicy(enabled=True)
    for text in ("sha 356a192b7913b04c54574d18c28d46e6395428ab", "at 1733050000000000000 ns", "max_tokens=1234",
                 "card 4111 1111 1111 1112", "https://example.com/a/b"):
        assert policy.clean(text) == text
