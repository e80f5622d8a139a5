"""Pytest fixtures the page's browser tests share (tests/stack/test_page*.py import them by name).

- ``stack``: one page stack per test module (``page.page_stack``), stopped after it;
- ``fresh_script`` (autouse): each test starts with an empty model script answering 「好的。」.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ops.stack import Stack
from testkit.page import page_stack
from testkit.scripted_model import ScriptedModel, Turn


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model: ScriptedModel) -> Iterator[Stack]:
    """The module's page stack (tansu and Redis of the session, every service, the scripted model)."""
    st = page_stack(infra_stack, tmp_path_factory.mktemp("page-data"), model)
    yield st
    st.stop()


@pytest.fixture(autouse=True)
def fresh_script(model: ScriptedModel) -> Iterator[None]:
    """Clear the scripted model before each test; unscripted turns answer 「好的。」."""
    model.script.clear()
    model.default = Turn(content="好的。")
    yield
