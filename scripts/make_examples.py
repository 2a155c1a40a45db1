"""Write the example corpus that ships inside the package (``contextpolicy/examples``).

Seeded, so running it again gives the same files:

    python scripts/make_examples.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from contextpolicy.synthetic import make_history, make_transcript

OUT = Path(__file__).resolve().parent.parent / "src" / "contextpolicy" / "examples"

SYSTEM = (
    "You are the support agent of an online shop. Answer from the evidence and the tools; "
    "never promise refunds you are not authorised to give."
)
AUTHORIZATION = "This agent may issue refunds up to 50 EUR without approval."
EVIDENCE = "Order 40213: shipped 2026-11-24 by carrier DHL, tracking DE4021300017, 2 parcels."
QUESTION = "My second parcel still hasn't arrived. Can you check where it is and refund it if lost?"

REDUCE = {
    "mode": "reduce", "triggerChars": 1800, "targetInputChars": 1500,
    "selection": {"mode": "sequence"},
    "steps": [{
        "id": "recent-history", "kind": "trim", "fragmentId": "history", "field": "messages",
        "grouping": {"kind": "user-turn"}, "keepGroups": 2, "targetChars": 1000,
    }],
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    history = make_history(48, seed=2026)
    plan = {"fragments": [
        {"id": "system", "kind": "system", "text": SYSTEM},
        {"id": "authorization", "kind": "authorization", "text": AUTHORIZATION},
        {"id": "evidence", "kind": "evidence", "text": EVIDENCE,
         "metadata": {"source": "orders-db"}},
        {"id": "history", "kind": "history", "messages": history},
        {"id": "question", "kind": "question", "text": QUESTION},
    ]}
    # The App trimmed its own history before sending, and (wrongly) edited the evidence.
    edited = json.loads(json.dumps(plan))
    edited["fragments"][3]["messages"] = history[-12:]
    edited["fragments"][2]["text"] = EVIDENCE.replace("2 parcels", "1 parcel")
    audit_plan = {"fragments": edited["fragments"], "original": plan["fragments"]}
    files = {
        "plan.json": plan,
        "audit-plan.json": audit_plan,
        "policy-validate.json": {"mode": "validate"},
        "policy-reduce.json": REDUCE,
        "policy-audit.json": {"mode": "audit", "mutableFragmentIds": ["history"]},
    }
    for name, doc in files.items():
        (OUT / name).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", "utf-8")
        print(f"wrote {OUT / name}")
    # The corpus `contextpolicy reduce` runs on when given no input: one support transcript
    # a line, of 8 to 120 messages.
    rng = np.random.default_rng(2026)
    lines = []
    for i in range(30):
        n = int(rng.integers(8, 120))
        messages = make_transcript(n, seed=1000 + i, system=SYSTEM)
        lines.append(json.dumps({"id": f"ticket-{40000 + i}", "messages": messages},
                                ensure_ascii=False))
    (OUT / "transcripts.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    print(f"wrote {OUT / 'transcripts.jsonl'}")


if __name__ == "__main__":
    main()
