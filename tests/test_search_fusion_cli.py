"""The issue's A/B/C fusion case end to end through ``judge search``: BM25 ranks A > B > C,
dense ranks B > C > A (A's cosine negative). With ``min_max`` and ``geometric`` or
``harmonic`` the passage both lists put second comes first, never last (each list's lowest
hit is floored at 0.001, as by OpenSearch, never taken for missing), through the embedded
engine's hybrid retriever and through ``engine = "hybrid"`` with ``sources``; ``l2`` or
``z_score`` with those means is exit 2 naming ``params.normalization``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from judge.cli import main
from judge.io import read_dataset
from judge.search import register_encoder

# BM25 for "apple": A (apple twice, short) > B > C (longer); no other passage holds "apple"
DOCS = {"A": "apple apple", "B": "apple pear plum", "C": "apple pear plum fig kiwi lime", "D": "stone"}
# the dense side: the query (1, 0); cosines B .5, C .4, A -.3, D -.9
COSINE = {"B": 0.5, "C": 0.4, "A": -0.3, "D": -0.9}


class ABCEncoder:
    """Two dimensions: a passage's vector has the cosine with the query set in COSINE."""

    name = "abc-test"
    version = "1"
    dim = 2

    def queries(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32).reshape(len(texts), 2)

    def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        by_text = {t: COSINE[k] for k, t in DOCS.items()}
        rows = [[by_text.get(t, 0.0), math.sqrt(1 - by_text.get(t, 0.0) ** 2)] for t in texts]
        return np.array(rows, dtype=np.float32).reshape(len(texts), 2)


@pytest.fixture(autouse=True)
def abc_encoder() -> Iterator[None]:
    register_encoder("abc-test", ABCEncoder)
    yield


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in DOCS.items()), encoding="utf-8"
    )
    index = tmp_path / "idx"
    assert (
        main(
            [
                "index",
                "build",
                str(docs),
                "-o",
                str(index),
                "--language",
                "en",
                "--dense",
                "--encoder",
                "abc-test",
            ]
        )
        == 0
    )
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "query": "apple"}\n', encoding="utf-8")
    (tmp_path / "lexical.toml").write_text('index = "idx"\ndepth = 3\n', encoding="utf-8")
    (tmp_path / "dense.toml").write_text(
        'index = "idx"\ndepth = 3\n[params]\nretriever = "dense"\n', encoding="utf-8"
    )
    return tmp_path


def search(folder: Path, name: str, body: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    cfg = folder / f"{name}.toml"
    cfg.write_text(body, encoding="utf-8")
    out = folder / f"{name}.jsonl"
    capsys.readouterr()
    assert main(["search", str(folder / "q.jsonl"), "--config", str(cfg), "-o", str(out)]) == 0
    return [p.id for p in read_dataset(out)[0].passages]


def test_the_sides_alone(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert search(corpus, "b", 'index = "idx"\ndepth = 3\n', capsys) == ["A", "B", "C"]
    assert search(corpus, "d", 'index = "idx"\ndepth = 3\n[params]\nretriever = "dense"\n', capsys) == [
        "B",
        "C",
        "A",
    ]


@pytest.mark.parametrize("combination", ["arithmetic", "geometric", "harmonic"])
def test_embedded_hybrid_min_max_puts_the_shared_second_first(
    corpus: Path, capsys: pytest.CaptureFixture[str], combination: str
) -> None:
    # dense side to depth 3: B 1, C (.4+.3)/.8 = .875, A 0 -> .001; BM25: A 1, B in (0, 1), C .001.
    # geometric: B sqrt(b) > A sqrt(.001) > C sqrt(.000875); harmonic alike; arithmetic:
    # A .5005, C .438, B (b + 1) / 2 > .5005 because BM25's b for B is above .001
    body = (
        'index = "idx"\ndepth = 3\n[params]\nretriever = "hybrid"\nfusion_depth = 3\n'
        f'normalization = "min_max"\ncombination = "{combination}"\n'
    )
    assert search(corpus, f"h-{combination}", body, capsys) == ["B", "A", "C"]


@pytest.mark.parametrize("combination", ["arithmetic", "geometric", "harmonic"])
def test_hybrid_engine_with_sources_puts_the_shared_second_first(
    corpus: Path, capsys: pytest.CaptureFixture[str], combination: str
) -> None:
    body = (
        'engine = "hybrid"\nsources = ["lexical.toml", "dense.toml"]\ndepth = 3\n[params]\n'
        f'fusion_depth = 3\nnormalization = "min_max"\ncombination = "{combination}"\n'
    )
    assert search(corpus, f"s-{combination}", body, capsys) == ["B", "A", "C"]


@pytest.mark.parametrize("normalization", ["l2", "z_score"])
@pytest.mark.parametrize("engine", ["embedded", "sources"])
def test_l2_and_z_score_with_a_mean_exit_2(
    corpus: Path, capsys: pytest.CaptureFixture[str], normalization: str, engine: str
) -> None:
    knobs = f'normalization = "{normalization}"\ncombination = "geometric"\n'
    if engine == "embedded":
        body = f'index = "idx"\n[params]\nretriever = "hybrid"\n{knobs}'
    else:
        body = f'engine = "hybrid"\nsources = ["lexical.toml", "dense.toml"]\n[params]\n{knobs}'
    cfg = corpus / "bad.toml"
    cfg.write_text(body, encoding="utf-8")
    out = corpus / "bad.jsonl"
    capsys.readouterr()
    assert main(["search", str(corpus / "q.jsonl"), "--config", str(cfg), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "params.normalization" in err and str(cfg) in err
    assert not out.exists()
