"""`agenttrace serve`: an OpenAI-compatible chat-completions server over our speculative
generator, so other frameworks can use it and the OpenAI client adapter is tested end to end.

    protocol.py   the wire format: request validation, prompt from messages and tools, bodies
    backend.py    one model, one request at a time; traced; streaming through the generator callback
    app.py        the Starlette routes and SSE streaming
    server.py     building the engine from the bundled model and running uvicorn
"""
