"""Wrappers around other libraries' objects (never patches of the libraries themselves).

    openai.py          wrap_openai: an OpenAI (or AsyncOpenAI) client whose chat completions
                       are generation spans (CLIENT), streamed or not
    openai_stream.py   the stream wrappers: time to first chunk, ending the span when the stream
                       ends, is closed, or is abandoned
    transformers.py    trace_generate: a transformers model whose `generate()` records prefill,
                       decode and, for assisted generation, the tokens accepted per verification
"""
