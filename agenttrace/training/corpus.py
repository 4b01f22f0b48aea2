"""What a draft head is trained on: the prompts an agent of ours sends (every task of the four
suites: its first step, its step after the tool's result, its retry after a schema mistake) and
free-text and code requests written here, varied by template and subject.

The split is fixed by a hash of each prompt's id (about `HELDOUT_SHARE` held out), and the
generation benchmark's own prompts are always held out, so a head is never measured on what it
was trained on."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from agenttrace.core.chat import Message

__all__ = ["HELDOUT_SHARE", "TrainingPrompt", "training_prompts"]

HELDOUT_SHARE = 0.15

_CONCEPTS = (
    "a hash table", "a race condition", "garbage collection", "a database index", "TCP slow start",
    "a mutex", "memoization", "a bloom filter", "eventual consistency", "a load balancer",
    "rate limiting", "a message queue", "idempotent requests", "a content delivery network",
    "backpressure", "a write-ahead log", "consistent hashing", "a deadlock", "tail latency",
    "speculative decoding", "a KV cache in a language model", "quantization of neural network weights",
    "gradient descent", "overfitting", "a unit test", "continuous integration", "semantic versioning",
    "a feature flag", "dependency injection", "a REST API", "JSON schema validation", "OAuth tokens",
    "a circuit breaker", "exponential backoff", "a trace span", "a p95 latency", "a cold start",
    "memory bandwidth", "a cache miss", "vectorized code", "a binary search", "recursion",
    "a linked list", "copy-on-write", "a thread pool",
)
_EXPLAIN = (
    "Explain {} to a new engineer in a short paragraph.",
    "What is {}? Answer in three sentences.",
    "Give one example of {} from everyday software work, in a few sentences.",
    "Describe a common mistake people make with {}.",
)
_CODE_TASKS = (
    "reverses the words of a sentence", "checks whether a string is a palindrome",
    "returns the n-th Fibonacci number iteratively", "counts the vowels in a string",
    "merges two sorted lists into one sorted list", "removes duplicates from a list while keeping order",
    "returns the median of a list of numbers", "converts Celsius to Fahrenheit",
    "parses a date in the form YYYY-MM-DD and returns the weekday", "flattens a nested list",
    "finds the most common word in a text", "splits a list into chunks of size n",
    "computes the factorial of n", "checks whether a number is prime", "returns the greatest common divisor of two numbers",
    "reads a CSV file and returns its rows as dictionaries", "validates an email address with a regular expression",
    "retries a function call up to three times with exponential backoff", "measures how long a function call takes",
    "returns the p95 of a list of latencies", "groups a list of records by a key",
    "sums the numbers in a JSON array", "capitalizes the first letter of every word",
    "returns the intersection of two lists", "rotates a list by k positions",
    "converts a Roman numeral to an integer", "counts the lines of a file",
    "returns the longest common prefix of a list of strings", "checks that brackets in a string are balanced",
    "computes a moving average over a window", "formats a number of bytes as KB, MB or GB",
    "sorts a list of dictionaries by a field",
)
_CODE = (
    "Write a Python function that {}.",
    "Write a short Python function that {}, with a docstring.",
    "Show a Python example of a function that {}.",
)
_SQL = (
    "the ten most expensive products", "the number of orders per customer", "customers who placed no order",
    "the total revenue per month", "the average price of products by category", "orders placed in the last week",
    "the customer with the most orders", "products that are out of stock", "the names of customers in Berlin",
    "the second highest price", "duplicate email addresses", "orders whose total exceeds 100",
)
_SQL_TEMPLATES = ("Write a SQL query that returns {}.", "How would you write SQL to find {}?")
_PASSAGES = (
    "the deploy failed twice yesterday because the staging database ran out of disk space, and nobody noticed "
    "until the alerts fired in the morning",
    "our agent calls the weather tool, then the unit converter, and finally answers; most of the time goes to the "
    "first model call, which prefills a long system prompt",
    "please remember to update the changelog before you tag a release, otherwise the packaging job publishes "
    "notes from the previous version",
    "the cache hit rate dropped from ninety percent to sixty percent after the new feature shipped, and latency at "
    "the 95th percentile doubled",
    "we moved the nightly benchmark to a dedicated machine so that its numbers stop drifting with whatever else "
    "runs on the shared runners",
    "the customer reported that exports time out for files over one gigabyte; the limit is in the proxy, not in "
    "the service itself",
    "i think we should try the smaller model first because it is cheaper and the tasks are simple, then compare "
    "the results with the bigger one",
    "the meeting is moved to thursday at three because the room is booked on wednesday, bring the slides about "
    "the quarterly numbers",
    "when the tool returns an error the agent should retry once with the corrected arguments and then give up "
    "and explain what went wrong",
    "the trace shows that validation takes almost no time but the tool call to the search service takes two "
    "seconds on average",
    "our team reviewed forty pull requests last week and merged thirty two of them; the rest need more tests",
    "the new parser accepts single quotes in JSON, which hides mistakes the model makes; we should reject them",
    "the report lists the slowest steps first, with the time spent in prefill, decoding, parsing and tools",
    "traffic doubles every monday morning, so the autoscaler should add machines before eight rather than after",
    "the survey says users want faster answers more than longer answers, and they dislike waiting for tools",
    "the library now supports three weight formats and picks the fastest one the processor can run",
)
_TEXT = (
    "Rewrite this message in a formal tone: {}.",
    "Fix the grammar and punctuation: {}.",
    "Summarize in one sentence: {}.",
    "Turn this note into a short bulleted list: {}.",
    "Write a polite reply to this message: {}.",
)
_LISTS = (
    "writing clear commit messages", "reviewing code", "reducing API latency", "writing good tests",
    "debugging a flaky test", "naming variables", "running a postmortem", "keeping a dependency tree small",
    "onboarding a new teammate", "monitoring a web service", "choosing a database", "writing documentation",
)
_LIST_TEMPLATES = ("List five tips for {}.", "Give three short rules for {}.")


@dataclass(frozen=True)
class TrainingPrompt:
    """One request to answer: its id, where it comes from, the chat messages, the token budget
    of its answer and its split ("train" or "heldout")."""

    id: str
    source: str
    messages: tuple[Message, ...]
    max_tokens: int
    split: str


def _split(prompt_id: str, forced: frozenset[str]) -> str:
    if prompt_id in forced:
        return "heldout"
    bucket = int(hashlib.sha256(prompt_id.encode()).hexdigest()[:8], 16) % 1000
    return "heldout" if bucket < HELDOUT_SHARE * 1000 else "train"


def _written() -> list[tuple[str, str, str, int]]:
    """(id, source, text, budget) of the written requests."""
    out = []
    for i, concept in enumerate(_CONCEPTS):
        for j, t in enumerate(_EXPLAIN):
            if (i + j) % 2 == 0:  # half of the pairs: variety without every concept four times
                out.append((f"explain-{i}-{j}", "free_text", t.format(concept), 160))
    for i, task in enumerate(_CODE_TASKS):
        t = _CODE[i % len(_CODE)]
        out.append((f"code-{i}", "code_text", t.format(task), 160))
    for i, what in enumerate(_SQL):
        out.append((f"sql-{i}", "code_text", _SQL_TEMPLATES[i % 2].format(what), 96))
    for i, passage in enumerate(_PASSAGES):
        for j, t in enumerate(_TEXT):
            if (i + j) % 2 == 0:
                out.append((f"text-{i}-{j}", "free_text", t.format(passage.capitalize()), 128))
    for i, topic in enumerate(_LISTS):
        out.append((f"list-{i}", "free_text", _LIST_TEMPLATES[i % 2].format(topic), 160))
    return out


def training_prompts() -> list[TrainingPrompt]:
    """Every training and held-out prompt, in a fixed order."""
    from agenttrace.bench.prompts import FREE_TEXT, task_steps
    from agenttrace.bench.workloads import SUITES, load_suite, tool_call_tasks

    # The generation benchmark's prompts: its free-text requests and its first two demo tasks.
    forced = {f"bench-free-{i}" for i in range(len(FREE_TEXT))}
    forced |= {f"tool_calls/{t.id}" for t in tool_call_tasks()[:2]}
    prompts: list[TrainingPrompt] = []

    def add(pid: str, source: str, messages, budget: int) -> None:
        # a task's steps share their split: its retry must not be trained on when its first step is held out
        group = pid.rsplit("/", 1)[0] if "/" in pid else pid
        prompts.append(TrainingPrompt(pid, source, tuple(messages), budget, _split(group, frozenset(forced))))

    from agenttrace.runtime.prompt import build_messages

    for name in SUITES:
        suite = load_suite(name)
        tools = suite.tools()
        for task in suite.tasks:
            steps = task_steps(task, tools, suite.examples)
            if steps is None:
                add(f"{name}/{task.id}/first", name, build_messages(tools, suite.examples, task.prompt), 96)
                continue
            for step in ("first", "second", "retry"):
                add(f"{name}/{task.id}/{step}", name, getattr(steps, step), 96)
    for i, text in enumerate(FREE_TEXT):
        add(f"bench-free-{i}", "free_text", [Message("user", text)], 160)
    for pid, source, text, budget in _written():
        add(pid, source, [Message("user", text)], budget)
    return prompts
