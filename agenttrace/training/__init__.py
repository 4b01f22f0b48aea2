"""Training the project's own draft heads on the target model (`agenttrace train-drafter`).

    corpus.py    what the heads learn from: the suites' agent prompts and written requests
    data.py      the target's own answers (batched) and its hidden states, stored in shards
    fit.py       training an EAGLE head or Medusa heads on those shards
    files.py     a trained head's file: weights, shapes, the target it fits and its recipe

Everything here imports torch; nothing in the agent's path imports this package.
"""
