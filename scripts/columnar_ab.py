"""The columnar summary's tree and value statements of two checkouts, alternated over one loaded
file in one chdb session: each statement's time, and a hash of every value table (the two must
agree). The machine drifts by a third over minutes; statements of one session, alternated, are
what compares two versions of a query.

    python scripts/columnar_ab.py dump OUT.json                  (this checkout's statements)
    PYTHONPATH=/path/to/other/worktree python scripts/columnar_ab.py dump BASE.json
    python scripts/columnar_ab.py compare BASE.json OUT.json FILE [ROUNDS]    (default 4)
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

_HASHED = ("x_tr", "x_seg", "x_sr", "x_tv", "x_gv", "x_dk", "x_kr")
_CREATE = re.compile(r"^CREATE TEMPORARY TABLE (\w+)")


def dump(out: str) -> None:
    from agenttrace.columnar import summary_sql, tree

    Path(out).write_text(json.dumps({"statements": [*tree.statements(), *summary_sql.statements()]}))


def _run(engine, statements: list[str]) -> tuple[dict[str, float], dict[str, int]]:
    from agenttrace.columnar.tree import created

    engine.drop(created(statements))
    times: dict[str, float] = {}
    for sql in statements:
        start = time.perf_counter()
        engine.q(sql)
        if m := _CREATE.match(sql):
            times[m.group(1)] = time.perf_counter() - start
    hashes = {n: engine.scalar(f"SELECT sum(cityHash64(toString(tuple(*)))) FROM {n}") for n in _HASHED}
    return times, hashes


def compare(base: str, new: str, file: str, rounds: int) -> None:
    from agenttrace.columnar.engine import Engine

    arms = {"base": json.loads(Path(base).read_text())["statements"],
            "new": json.loads(Path(new).read_text())["statements"]}
    engine = Engine(threads=2)
    start = time.perf_counter()
    engine.load_files([Path(file)])
    print(f"loaded in {time.perf_counter() - start:.2f} s", flush=True)
    seen = set()
    for r in range(rounds):
        for arm in ("base", "new") if r % 2 == 0 else ("new", "base"):
            times, hashes = _run(engine, arms[arm])
            seen.add(tuple(sorted(hashes.items())))
            slow = " ".join(f"{n}={t:.2f}" for n, t in times.items() if t >= 0.15)
            print(f"{arm:4s} {sum(times.values()):6.2f} s  {slow}", flush=True)
    print("value tables equal in every run" if len(seen) == 1 else "VALUE TABLES DIFFER")


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"]:
        dump(sys.argv[2])
    else:
        compare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 4)
