"""`agenttrace serve` under abuse, on a tiny random-weight model and a byte-level tokenizer
built here: oversized bodies and prompts, hostile JSON, NaN, `max_tokens` over the cap, clients
that go away, and Ctrl-C. Every refusal is an OpenAI error body, and none keeps the model busy."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("uvicorn")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from agenttrace import MonotonicClock  # noqa: E402
from agenttrace import semconv as sc  # noqa: E402
from agenttrace.serve.limits import ServeLimits  # noqa: E402
from agenttrace.serve.server import BackgroundServer, ServeOptions, build_engine  # noqa: E402
from agenttrace.testing import capture_telemetry  # noqa: E402

CONTEXT = 256  # the tiny model's positions: the default prompt limit
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
USER = [{"role": "user", "content": "hello"}]


def tiny_tokenizer():
    """A byte-level BPE (so any text encodes) with pad 0, BOS 1, EOS 2 and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world, the user and the assistant say hello"] * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = TEMPLATE
    return fast


def tiny_loaded(step_s: float = 0.0) -> SimpleNamespace:
    """What `build_engine` takes: a 2-layer random Llama over `tiny_tokenizer()`; with `step_s`,
    every forward pass sleeps that long, so a long generation is long on any machine."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    if step_s:
        # on the decoder stack: the batching engine's passes call it without the LM wrapper
        model.model.register_forward_pre_hook(lambda *_: time.sleep(step_s))
    return SimpleNamespace(model=model, tokenizer=tokenizer, name="tiny")


@pytest.fixture(scope="module")
def served():
    """A server on the tiny model whose every forward pass takes 20 ms, with a 256 KiB body limit."""
    tel, spans = capture_telemetry(MonotonicClock())
    engine = build_engine(tiny_loaded(step_s=0.02), tel, ServeOptions(speculative=False))
    limits = ServeLimits(max_body_bytes=256 << 10, max_tokens=2000, disconnect_poll_s=0.05)
    with BackgroundServer(engine, limits=limits) as server:
        yield server, spans
    tel.shutdown()


def post(server, body: bytes | dict, *, timeout: float = 30.0, path: str = "/v1/chat/completions",
         method: str = "POST", chunked: bool = False) -> tuple[int, dict, float]:
    """(status, JSON body, seconds taken) of one request over a fresh connection; `chunked`
    sends the body in 64 KiB chunks without a Content-Length."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = (raw[i : i + (64 << 10)] for i in range(0, len(raw), 64 << 10)) if chunked else raw
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request(method, path, body=sent, headers={"Content-Type": "application/json"}, encode_chunked=chunked)
        reply = conn.getresponse()
        data = reply.read()
    finally:
        conn.close()
    return reply.status, json.loads(data), time.monotonic() - started


def chat(server, **fields) -> dict:
    return {"model": server.engine.model_name, "messages": USER, **fields}


def error_of(status_body: tuple[int, dict, float], status: int) -> dict:
    got, body, _ = status_body
    assert got == status, body
    assert set(body["error"]) == {"message", "type", "param", "code"}  # OpenAI's error shape
    return body["error"]


def test_a_request_within_the_limits_is_answered(served):
    server, _ = served
    status, body, _ = post(server, chat(server, max_tokens=3))
    assert status == 200 and body["usage"]["completion_tokens"] <= 3


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_10_mb_body_is_refused_413_without_being_parsed(served, chunked):
    server, _ = served
    filler = b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"x" * (10 << 20) + b'"}]}'
    reply = post(server, filler, chunked=chunked)
    err = error_of(reply, 413)
    assert err["code"] == "request_too_large" and str(256 << 10) in err["message"]
    assert reply[2] < 10  # read and dropped, never parsed, tokenized or generated from


def test_a_prompt_over_the_model_context_is_refused_400(served):
    server, spans = served
    spans.clear()
    huge = [{"role": "user", "content": "hello world " * 4000}]  # ~48k characters, well within 256 KiB
    reply = post(server, chat(server, messages=huge))
    err = error_of(reply, 400)
    assert err["code"] == "context_length_exceeded" and f"at most {CONTEXT} prompt tokens" in err["message"]
    assert not spans.get_finished_spans()  # refused before it reached the model


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than the limit of 64 levels"),
        (b'{"model": "tiny", "x": ' + b"[" * 100 + b"]" * 100 + b"}", "nests deeper than the limit of 64 levels"),
        (b'{"model": "tiny", "max_tokens": ' + b"7" * 5000 + b"}", "integer of more than 4300 digits"),
        (b'{"model": "tiny", "messages": [', "not valid JSON"),
        (b'{"model": "tiny\xff"}', "not valid UTF-8"),
        (b"[1, 2]", "invalid request: Input should be a valid dictionary"),
    ],
    ids=["100k-deep", "100-deep", "5000-digit-integer", "truncated", "bad-utf8", "not-an-object"],
)
def test_hostile_json_is_refused_400(served, body, said):
    server, _ = served
    assert said in error_of(post(server, body), 400)["message"]


def test_a_lone_surrogate_is_refused_400_naming_the_field(served):
    server, _ = served
    raw = json.dumps(chat(server, messages=[{"role": "user", "content": "a\ud800b"}])).encode()
    assert b"\\ud800" in raw  # as JSON carries it: an escape that decodes to no character
    err = error_of(post(server, raw), 400)
    assert err["param"] == "messages[0].content" and "lone surrogate (U+D800)" in err["message"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_temperature_that_is_not_a_finite_number_says_so(served, value):
    server, _ = served
    raw = json.dumps(chat(server)).encode()[:-1] + b', "temperature": ' + value.encode() + b"}"
    err = error_of(post(server, raw), 400)
    assert err["param"] == "temperature" and err["message"] == "invalid request: temperature: Input should be a finite number"


def test_max_tokens_over_the_cap_is_refused_not_trimmed(served):
    server, _ = served
    for field in ("max_tokens", "max_completion_tokens"):
        err = error_of(post(server, chat(server, **{field: 2001})), 400)
        assert err["param"] == "max_tokens" and "at most 2000 completion tokens" in err["message"]
    err = error_of(post(server, chat(server, stop=[str(i) for i in range(17)])), 400)
    assert err["param"] == "stop"


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "foo"}, "Invalid type: foo"),
        ({"$ref": "#/$defs/missing"}, "'/$defs/missing' does not exist"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength (5) is greater than maxLength (2)"),
        ({"type": "string", "pattern": "(unclosed"}, "unclosed group"),  # the engine's second line, kept
    ],
    ids=["unknown-type", "dangling-ref", "unsatisfiable", "bad-pattern"],
)
def test_a_json_schema_that_does_not_compile_is_refused_400(served, schema, said):
    server, spans = served
    spans.clear()
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    err = error_of(post(server, chat(server, max_tokens=3, response_format=fmt)), 400)
    assert err["param"] == "response_format.json_schema.schema" and err["code"] == "invalid_json_schema"
    assert err["message"].startswith("invalid schema for response_format: ") and said in err["message"]
    assert not spans.get_finished_spans()  # refused before generation, not decoded unconstrained


def test_tools_whose_schema_does_not_compile_are_refused_400_when_constrained(served):
    server, _ = served
    params = {"type": "object", "properties": {"city": {"$ref": "#/$defs/missing"}}}
    tools = [{"type": "function", "function": {"name": "weather", "parameters": params}}]
    err = error_of(post(server, chat(server, max_tokens=3, tools=tools, tool_choice="required")), 400)
    assert err["param"] == "tools" and "'/$defs/missing' does not exist" in err["message"]
    assert post(server, chat(server, max_tokens=3, tools=tools))[0] == 200  # "auto" is not constrained here


@contextlib.contextmanager
def server_log():
    """Every record the server logs (uvicorn's loggers do not propagate to the root), debug included."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    loggers = [logging.getLogger(name) for name in ("", "uvicorn")]
    ours = logging.getLogger("agenttrace.serve")
    level = ours.level
    for lg in loggers:
        lg.addHandler(handler)
    ours.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        ours.setLevel(level)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_client_that_hangs_up_mid_body_leaves_no_traceback(served, chunked):
    server, spans = served
    spans.clear()
    raw = json.dumps(chat(server, max_tokens=3)).encode()
    half = raw[: len(raw) // 2]
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(raw)}"
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    with server_log() as records:
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(head.encode() + (f"{len(half):x}\r\n".encode() + half + b"\r\n" if chunked else half))
            time.sleep(0.1)  # the server is reading the body when the client goes
        deadline = time.monotonic() + 5
        while not any(r.levelno >= logging.INFO or "disconnected" in r.getMessage() for r in records):
            assert time.monotonic() < deadline, "the server never noticed the hang-up"
            time.sleep(0.01)
        assert post(server, chat(server, max_tokens=2))[0] == 200  # and keeps serving
    noisy = [r for r in records if r.levelno >= logging.INFO or r.exc_info]
    assert not noisy, [(r.name, r.getMessage()) for r in noisy]  # one debug line, no traceback
    assert [r.name for r in records if "disconnected" in r.getMessage()] == ["agenttrace.serve.limits"]
    assert [s.attributes.get(sc.ERROR_TYPE) for s in spans.get_finished_spans() if s.name == "chat tiny"] == [None]
    # (the one that followed: the half request never reached the model)


def test_unknown_routes_and_methods_get_json_errors(served):
    server, _ = served
    assert error_of(post(server, b"", path="/v2/nothing", method="GET"), 404)["message"] == "Not Found"
    assert error_of(post(server, b"", method="GET"), 405)["type"] == "invalid_request_error"


def test_a_bug_in_the_server_is_a_json_500(served, monkeypatch):
    server, _ = served

    def broken(messages):
        raise RuntimeError("a bug")

    monkeypatch.setattr(server.engine, "encode", broken)
    err = error_of(post(server, chat(server)), 500)
    assert err["type"] == "server_error" and err["message"] == "internal server error: RuntimeError: a bug"


def test_refusals_and_health_are_answered_while_the_model_generates(served):
    server, _ = served
    busy: list[tuple[int, dict, float]] = []
    worker = threading.Thread(target=lambda: busy.append(post(server, chat(server, max_tokens=100))))  # ~2 s
    worker.start()
    while not server.engine._running:
        time.sleep(0.01)
    huge = chat(server, messages=[{"role": "user", "content": "hello world " * 4000}])
    started = time.monotonic()
    assert error_of(post(server, huge), 400)["code"] == "context_length_exceeded"
    assert post(server, b"", path="/health", method="GET")[:2] == (200, {"status": "ok"})
    assert time.monotonic() - started < 1.5 and worker.is_alive()  # neither waited for the model
    worker.join(30)
    assert busy[0][0] == 200


def _abandon(server, body: dict, after_s: float) -> None:
    """Send `body` and close the connection after `after_s` without reading the answer."""
    with socket.create_connection((server.host, server.port)) as sock:
        raw = json.dumps(body).encode()
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
        sock.sendall(head.encode() + raw)
        time.sleep(after_s)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streaming"])
def test_a_client_that_goes_away_stops_its_generation(served, stream):
    server, spans = served
    spans.clear()
    # 2000 tokens at 20 ms a forward pass: 40 s if it ran to the end.
    _abandon(server, chat(server, max_tokens=2000, stream=stream), after_s=0.5)
    status, body, took = post(server, chat(server, max_tokens=2))
    assert status == 200 and took < 5, (took, body)  # the model was freed within a round or two
    errors = [s.attributes.get(sc.ERROR_TYPE) for s in spans.get_finished_spans() if s.name == "chat tiny"]
    assert sorted(errors, key=str) == [None, "cancelled"]  # the abandoned one, then the next


def test_stopping_the_server_cancels_generation_in_flight():
    tel, spans = capture_telemetry(MonotonicClock())
    engine = build_engine(tiny_loaded(step_s=0.02), tel, ServeOptions(speculative=False))
    server = BackgroundServer(engine).start()
    replies: list[tuple[int, dict, float]] = []
    waiting = threading.Thread(target=lambda: replies.append(post(server, chat(server, max_tokens=2000))))
    waiting.start()
    while not engine._running:  # the request has reached the engine
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    waiting.join(10)
    assert time.monotonic() - started < 5 and not server._thread.is_alive()
    err = error_of(replies[0], 503)
    assert err["code"] == "server_shutting_down"
    (served,) = [s for s in spans.get_finished_spans() if s.name == "chat tiny"]
    assert served.attributes[sc.ERROR_TYPE] == "cancelled"
    tel.shutdown()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_serve_command_without_a_traceback(tmp_path, sig):
    loaded = tiny_loaded()
    loaded.model.save_pretrained(tmp_path)
    loaded.tokenizer.save_pretrained(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "agenttrace", "serve", "--model", str(tmp_path), "--port", "0", "--no-speculative"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        seen, line = [], ""
        deadline = time.monotonic() + 120
        while "http://" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen.append(line)
            assert line or proc.poll() is None, "".join(seen)
        url = line[line.index("http://") :].split()[0].removesuffix("/v1")
        host, port = url.removeprefix("http://").rsplit(":", 1)
        server = SimpleNamespace(host=host, port=int(port), engine=SimpleNamespace(model_name=tmp_path.name))
        for _ in range(100):  # the address is printed just before uvicorn accepts
            try:
                assert post(server, chat(server, max_tokens=2))[0] == 200
                break
            except OSError:
                time.sleep(0.1)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(seen) + out
    assert "Traceback" not in out and "agenttrace serve: stopped" in out, out
    assert proc.returncode == 0
