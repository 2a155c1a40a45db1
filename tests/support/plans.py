"""The hypothesis strategy of whole context plans."""

from __future__ import annotations

from hypothesis import strategies as st

from contextpolicy import (
    ContextPlan,
    Fragment,
)

from .strategies import histories, text


@st.composite
def plans(draw):
    fragments = []
    if draw(st.booleans()):
        fragments.append(Fragment(id="system", kind="system", text=draw(text)))
    else:
        fragments.append(Fragment(id="system", kind="system",
                                  messages=[{"role": "system", "content": draw(text)}]))
    fragments.append(Fragment(id="history", kind="history", messages=draw(histories())))
    if draw(st.booleans()):
        fragments.append(Fragment(id="memory", kind="memory", messages=draw(histories())))
    if draw(st.booleans()):
        fragments.append(Fragment(id="notes", kind="note", text=draw(text) * draw(st.integers(1, 50))))
    if draw(st.booleans()):
        fragments.append(Fragment(id="evidence", kind="evidence", text=draw(text)))
    fragments.append(Fragment(id="question", kind="question", text=draw(text)))
    return ContextPlan(fragments=draw(st.permutations(fragments)))
