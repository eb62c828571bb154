"""A griffe extension for the API reference: the docstrings are written for Python's
``help()`` and Sphinx-style roles (``:class:`Name```, ``Word::`` before an example), which
Markdown would print as they are. This turns a role into inline code and a ``::`` into ``:``;
the indented example after it is a code block in Markdown already."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`~?([^`]+)`")
LITERAL_MARK = re.compile(r"(\S)::$", re.M)
BARE_LITERAL_MARK = re.compile(r"^\s*::\s*$", re.M)


def markdown(text: str) -> str:
    """``text`` with its Sphinx roles and literal-block marks in Markdown."""
    text = ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = LITERAL_MARK.sub(r"\1:", text)
    return BARE_LITERAL_MARK.sub("", text)


class SphinxRoles(griffe.Extension):
    """Rewrite every loaded object's docstring with :func:`markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
