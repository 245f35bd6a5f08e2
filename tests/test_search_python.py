"""The python engine: a function (sync or async, dicts or tuples) and a LangChain retriever."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from judge.io import read_dataset
from judge.search import Query, SearchError, load_config, run_search

MODULE = """
import asyncio

CALLS = []

def search(query, depth, boost=1.0):
    CALLS.append((query, depth, boost))
    hits = [("a", "alpha " + query, 2.0 * boost), ("b", "beta", 1.0)]
    return hits[:depth]

async def asearch(query, depth):
    await asyncio.sleep(0)
    return [{"id": 7, "text": "seven"}, {"id": "x", "text": "ex", "score": 0.5}][:depth]

def broken(query, depth):
    return [{"text": "no id"}]

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

class Keyword(BaseRetriever):
    docs: list

    def _get_relevant_documents(self, query, *, run_manager: CallbackManagerForRetrieverRun):
        return [d for d in self.docs if query in d.page_content]

RETRIEVER = Keyword(docs=[
    Document(page_content="pale gums in dogs", metadata={"id": "d1"}),
    Document(page_content="cats and dogs", id="d2"),
    Document(page_content="tea"),
])
"""


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "my_retriever_mod.py").write_text(MODULE, encoding="utf-8")
    yield folder
    sys.modules.pop("my_retriever_mod", None)


def config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "py.toml"
    path.write_text(f'engine = "python"\npythonpath = "code"\ndepth = 2\n{body}', encoding="utf-8")
    return path


def test_sync_function_with_knobs(tmp_path: Path, module_dir: Path) -> None:
    cfg = load_config(config(tmp_path, 'callable = "my_retriever_mod:search"\n[params]\nboost = 1.5\n'))
    run = run_search([Query("q1", "dogs"), Query("q2", "cats")], cfg, tmp_path / "r.jsonl")
    mod = sys.modules["my_retriever_mod"]
    assert sorted(mod.CALLS) == [("cats", 2, 1.5), ("dogs", 2, 1.5)]
    rec = read_dataset(run.dataset_path)[0]
    assert [(p.id, p.text) for p in rec.passages] == [("a", "alpha dogs"), ("b", "beta")]
    first = json.loads(run.dataset_path.read_text().splitlines()[0])
    assert [p["score"] for p in first["retrieval_context"]] == [3.0, 1.0]


def test_async_function_and_langchain_retriever(tmp_path: Path, module_dir: Path) -> None:
    cfg = load_config(config(tmp_path, 'callable = "my_retriever_mod:asearch"\n'))
    run = run_search([Query("q", "x")], cfg, tmp_path / "a.jsonl")
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == ["7", "x"]
    cfg = load_config(config(tmp_path, 'retriever = "my_retriever_mod:RETRIEVER"\n'))
    run = run_search([Query("q1", "dogs"), Query("q2", "zebra")], cfg, tmp_path / "lc.jsonl")
    assert [p.id for p in read_dataset(run.dataset_path)[0].passages] == ["d1", "d2"]
    assert run.no_hits == ("q2",)


def test_python_engine_errors_name_the_field(tmp_path: Path, module_dir: Path) -> None:
    cases = [
        ('callable = "my_retriever_mod:broken"\n', "callable", "no id"),
        ('callable = "my_retriever_mod:missing"\n', "callable", "has no attribute"),
        ('callable = "no_such_module_xyz:f"\n', "callable", "cannot import"),
        ('retriever = "my_retriever_mod:CALLS"\n', "retriever", "not a LangChain retriever"),
    ]
    for body, field, message in cases:
        path = config(tmp_path, body)
        with pytest.raises(SearchError, match=message) as err:
            run_search([Query("q", "x")], load_config(path), tmp_path / f"{field}.jsonl")
        assert (err.value.path, err.value.field) == (str(path), field)
