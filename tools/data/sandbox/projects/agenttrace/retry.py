"""Retry policy of the trace uploader."""

MAX_RETRIES = 4


def backoff_seconds(attempt: int, base: float = 0.5, cap: float = 8.0) -> float:
    """Exponential backoff with a cap: 0.5, 1, 2, 4, 8, 8, ..."""
    return min(cap, base * 2**attempt)
