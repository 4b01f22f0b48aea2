#!/usr/bin/env python3
"""Write the long-horizon suite's documents (tools/data/documents/*.txt): long, plain-text
reports in which one or two sentences hold the fact a task asks for, among paragraphs that do
not. Deterministic (seeded); rerun to regenerate. Each is about 3,600 tokens of the bundled
model's tokenizer, so two of them fill the default compaction budget (90% of 8,192 positions)."""

from __future__ import annotations

import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tools" / "data" / "documents"
TARGET_CHARS = 17_500

SUBJECTS = ["the deployment pipeline", "the on-call rotation", "the customer portal", "the billing export",
            "the search index", "the staging cluster", "the mobile release", "the data warehouse",
            "the access review", "the office move", "the hiring plan", "the vendor contract"]
VERBS = ["was reviewed", "was discussed at length", "needs another pass", "was postponed by a week",
         "is on track", "was handed to a new owner", "showed no change", "was compared with last quarter"]
DETAILS = ["Several people asked for clearer ownership.", "The dashboard figures were checked twice.",
           "A follow-up ticket was opened for the remaining items.", "Nobody objected to the proposal.",
           "The numbers were within the usual range.", "Two small regressions were fixed the same day.",
           "The notes from the previous session were read out.", "The team agreed to revisit it next month.",
           "Most of the time went to questions about scope.", "A short demo was given at the end."]


def paragraph(rnd: random.Random) -> str:
    sentences = []
    for _ in range(rnd.randint(3, 5)):
        sentences.append(f"{rnd.choice(SUBJECTS).capitalize()} {rnd.choice(VERBS)}. {rnd.choice(DETAILS)}")
    return " ".join(sentences)


def document(title: str, facts: list[str], seed: int) -> str:
    rnd = random.Random(seed)
    parts = [title]
    slots = sorted(rnd.sample(range(4, 30), len(facts)))
    i = 0
    while sum(len(p) + 1 for p in parts) < TARGET_CHARS:
        if slots and i == slots[0]:
            parts.append(facts[len(facts) - len(slots)])
            slots.pop(0)
        else:
            parts.append(paragraph(rnd))
        i += 1
    for fact in facts[len(facts) - len(slots):]:  # any slot past the end: the fact still goes in
        parts.append(fact)
    return "\n\n".join(parts) + "\n"


DOCS = {
    "incident-march": ("Incident report, March.", ["The outage on March 9 hit the payments service, which stopped "
                       "taking orders for 40 minutes.", "Root cause: the disk on host db-3 filled up."]),
    "incident-april": ("Incident report, April.", ["On April 21 the payments service failed again, for 25 minutes.",
                       "Root cause: a certificate on the load balancer expired."]),
    "notes-q1": ("Meeting notes, first quarter.", ["Decision: Priya Natarajan was named project lead for the "
                 "portal rewrite."]),
    "notes-q2": ("Meeting notes, second quarter.", ["The budget for the portal rewrite was set at 180,000 euros."]),
    "log-tuesday": ("Operations log, Tuesday.", ["At 03:12 host db-3 reported the disk at 97% full."]),
    "log-wednesday": ("Operations log, Wednesday.", ["At 02:55 host db-3 ran out of disk and stopped accepting "
                      "writes."]),
    "handbook-part1": ("Staff handbook, part one.", ["New staff get 25 vacation days a year."]),
    "handbook-part2": ("Staff handbook, part two.", ["Remote work is allowed up to three days a week."]),
    "survey-a": ("City survey, first half.", ["Lisbon scored 8.7, the highest score of the first half."]),
    "survey-b": ("City survey, second half.", ["Oslo scored 8.1, below the first half's best."]),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, (name, (title, facts)) in enumerate(sorted(DOCS.items())):
        (OUT / f"{name}.txt").write_text(document(title, facts, seed=i), encoding="utf-8")


if __name__ == "__main__":
    main()
