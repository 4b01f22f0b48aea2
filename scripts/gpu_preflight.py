"""Before the GPU stages: the project's imports as installed, one speculative generation on a tiny
random model on the device through the loading code stage B uses (`load_model` on a folder), and
llama.cpp's library opened. Seconds, in the first run, so a fault shows while the session still
has device time to send a fix (the tree travels with every run), not after the model has.

    python scripts/gpu_preflight.py cuda|cpu
"""

from __future__ import annotations

import sys
import tempfile


def main(device: str) -> None:
    import agenttrace.examples.agents.demo_command  # noqa: F401  (agents/ as installed: agenttrace.examples)
    from agenttrace.core.chat import GenerationParams
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_model

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", pad_token="w0", eos_token="w2")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, eos_token_id=2))
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        loaded = load_model(folder, device=device, dtype="float32" if device == "cpu" else "bfloat16")
        chat = LocalChatModel(loaded.model, loaded.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=4,
                              fallback=False)
        prompt = [5, 6, 7, 8, 9, 10]
        _, first = chat.complete_ids(prompt, GenerationParams(max_tokens=8))
        # the prompt again after its own continuation: prompt lookup drafts that continuation, so
        # verify passes run (accepted or not)
        _, out = chat.complete_ids(prompt + first.tokens + prompt, GenerationParams(max_tokens=8))
    llama = "not installed"
    try:
        from agenttrace.generation.llama_lib import open_library

        open_library()
        llama = "opened"
    except ModuleNotFoundError:
        pass
    print(f"preflight: ok on {loaded.model.device} ({len(out.tokens)} tokens, {len(out.rounds)} rounds); "
          f"llama.cpp's library {llama}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
