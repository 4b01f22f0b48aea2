"""Wrappers around other libraries' objects (never patches of the libraries themselves).

    openai.py          wrap_openai: an OpenAI (or AsyncOpenAI) client whose chat completions
                       are generation spans (CLIENT), streamed or not
    openai_stream.py   the stream wrappers: time to first chunk, ending the span when the stream
                       ends, is closed, or is abandoned
    callable.py        wrap_model: any function that calls a model (a vendor SDK, an HTTP
                       helper) whose every call is a generation span
    replies.py         what a reply says about itself (usage, finish reasons, tool calls,
                       model, id), read from OpenAI, Anthropic-style or dict shapes
    transformers.py    trace_generate: a transformers model whose `generate()` records prefill,
                       decode and, for assisted generation, the tokens accepted per verification
"""
