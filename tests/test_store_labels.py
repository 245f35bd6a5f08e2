"""The label store: migrations, history, latest-per-reviewer, conflicts, label files."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from judge.io import InputError
from judge.metrics import ScaleError
from judge.store import (
    LABEL_SCHEMA_VERSION,
    CacheVersionError,
    Calibration,
    Label,
    LabelSet,
    LabelStore,
    default_labels_path,
    labels_to_jsonl,
    labels_to_qrels,
    read_label_file,
)


def test_default_path_is_beside_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path))
    assert default_labels_path() == tmp_path / "labels.sqlite"


def test_new_file_is_migrated_in_order_and_a_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with LabelStore(path) as store:
        assert store.schema_found == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == LABEL_SCHEMA_VERSION == 6
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"labels", "label_history", "calibrations", "sample_rounds", "sample_frames"} <= tables
    assert "sample_draws" not in tables  # migration 6 moved its rows to the per-job frames
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    with LabelStore(path) as store:  # reopening finds the current version and keeps it
        assert store.schema_found == LABEL_SCHEMA_VERSION


def test_version_three_file_gets_the_sample_draws(tmp_path: Path) -> None:
    from judge.store._label_schema import _m001_labels, _m002_calibrations, _m003_checked

    path = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(path)
    for migration in (_m001_labels, _m002_calibrations, _m003_checked):
        migration(conn)
    conn.execute(
        "INSERT INTO label_history (collection, qid, docno, reviewer, label, scale, created) "
        "VALUES ('default', 'q1', 'd1', 'ann', 1, 'binary', 1.0)"
    )
    conn.execute("INSERT INTO labels VALUES ('default', 'q1', 'd1', 'ann', 1)")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with LabelStore(path) as store:
        assert store.schema_found == 3
        (old,) = store.latest()
        assert old.label == 1 and old.inclusion is None  # drawn with no known probability
        frame = [("q1", "d2", 0.25, True), ("q1", "d3", 0.25, False)]
        assert store.record_sample_draws("job", frame, design="uniform", collection="default", number=0) == (
            1,
            1,
        )
        store.put(Label("q1", "d2", 0, "ann"))
        assert store.sample_draws() == [("q1", "d2", 0.25, "uniform")]


def test_version_five_draws_move_to_a_legacy_frame_that_refuses_a_second_draw(tmp_path: Path) -> None:
    """Migration 6: a draw recorded by migration 4's table (the drawn pairs only) keeps its
    pairs and probabilities; a further draw over that job is refused (its population's other
    pairs were never recorded, so their union probabilities are unknown)."""
    from judge.store._label_schema import LABEL_MIGRATIONS

    path = tmp_path / "v5.sqlite"
    conn = sqlite3.connect(path)
    for migration in LABEL_MIGRATIONS[:5]:
        migration(conn)
    conn.execute("INSERT INTO sample_draws VALUES ('default', 'q1', 'd2', 'old', 0.25, 'uniform', 1.0)")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    with LabelStore(path) as store:
        assert store.sample_draws(job="old") == [("q1", "d2", 0.25, "uniform")]
        assert store.sample_round("old", collection="default") == 1
        with pytest.raises(InputError) as err:
            store.record_sample_draws(
                "old", [("q1", "d2", 0.25, False)], design="uniform", collection="default", number=1
            )
        assert err.value.field == "job" and "older judge" in err.value.message


def test_two_draws_record_the_union_probability(tmp_path: Path) -> None:
    """Two draws over one job at 0.25 each: every pair of the job has been drawable twice, so
    a drawn pair's inclusion probability is 1 - (1 - 0.25)^2 = 0.4375, whichever draw took it
    (a pair taken by both counts once); another job keeps its own probabilities."""

    def draw(store: LabelStore, job: str, frame: list[tuple[str, str, float, bool]], **kw: Any) -> Any:
        return store.record_sample_draws(job, frame, collection="default", **{"design": "uniform", **kw})

    with LabelStore(tmp_path / "l.sqlite") as store:
        first = [("q", "a", 0.25, True), ("q", "b", 0.25, False), ("q", "c", 0.25, False)]
        second = [("q", "a", 0.25, True), ("q", "b", 0.25, True), ("q", "c", 0.25, False)]
        assert store.record_sample_draws("j1", first, design="uniform", collection="default", number=0) == (
            1,
            1,
        )
        assert store.sample_draws(job="j1") == [("q", "a", 0.25, "uniform")]
        with pytest.raises(InputError) as err:  # made as the first draw, but one is recorded
            draw(store, "j1", second, number=0)
        assert err.value.field == "job"
        assert store.record_sample_draws(
            "j1", second, design="uncertainty", collection="default", number=1
        ) == (
            2,
            1,
        )
        assert store.sample_draws(job="j1") == [
            ("q", "a", 0.4375, "uniform+uncertainty"),
            ("q", "b", 0.4375, "uniform+uncertainty"),
        ]
        store.record_sample_draws(
            "j2", [("q", "c", 0.5, True)], design="uniform", collection="default", number=0
        )
        assert store.sample_draws(job="j2") == [("q", "c", 0.5, "uniform")]
        assert store.sample_jobs() == ["j1", "j2"] and store.sample_round("j1", collection="default") == 2
        with pytest.raises(InputError) as err:  # below the floor: 1 / p is not meaningful
            store.record_sample_draws(
                "j3", [("q", "a", 1e-320, True)], design="u", collection="default", number=0
            )
        assert err.value.field == "inclusion" and store.sample_jobs() == ["j1", "j2"]


def test_version_one_file_gets_the_calibrations_table(tmp_path: Path) -> None:
    from judge.store._label_schema import _m001_labels

    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    _m001_labels(conn)
    conn.execute(
        "INSERT INTO label_history (collection, qid, docno, reviewer, label, scale, created) "
        "VALUES ('default', 'q1', 'd1', 'ann', 1, 'binary', 1.0)"
    )
    conn.execute("INSERT INTO labels VALUES ('default', 'q1', 'd1', 'ann', 1)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with LabelStore(path) as store:
        assert store.schema_found == 1
        assert [x.label for x in store.latest()] == [1]
        store.save_calibration(Calibration("c", "binary.zh.v2", 0.6))
        assert store.calibration("c") is not None

    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {LABEL_SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(CacheVersionError, match="newer"):
        LabelStore(path)


def test_history_keeps_every_change_and_the_latest_per_reviewer_counts(tmp_path: Path) -> None:
    with LabelStore(tmp_path / "l.sqlite") as store:
        store.put(Label("q1", "d1", 1, "ann", created=10.0, judge_verdict="no", judge_p_yes=0.41))
        store.put(Label("q1", "d1", 0, "ann", created=20.0, comment="on second thought"))
        store.put(Label("q1", "d2", 1, "ann", created=30.0))
        store.retract("q1", "d2", "ann")
        history = store.history()
        assert [(h.docno, h.label) for h in history] == [("d1", 1), ("d1", 0), ("d2", 1), ("d2", None)]
        assert history[0].judge_verdict == "no" and history[0].judge_p_yes == 0.41
        latest = store.latest()
        assert [(x.docno, x.label, x.comment) for x in latest] == [("d1", 0, "on second thought")]
        assert store.count() == 1
        resolved = store.label_set().lookup("q1", "d1")
        assert resolved is not None and resolved.value == 0 and not resolved.conflict


def test_conflicts_between_reviewers_and_the_most_recent_label_applies(tmp_path: Path) -> None:
    with LabelStore(tmp_path / "l.sqlite") as store:
        store.put(Label("q1", "d1", 1, "ann", created=10.0))
        store.put(Label("q1", "d1", 0, "bob", created=20.0))
        store.put(Label("q1", "d2", 1, "ann", created=10.0))
        store.put(Label("q1", "d2", 1, "bob", created=20.0))
        store.put(Label("q2", "d1", 1, "ann", collection="other"))
        conflicts = store.conflicts()
        assert [(c.qid, c.docno, dict(c.labels)) for c in conflicts] == [("q1", "d1", {"ann": 1, "bob": 0})]
        hit = store.label_set().lookup("q1", "d1")
        assert hit is not None and hit.value == 0 and hit.label.reviewer == "bob" and hit.conflict
        assert store.label_set().lookup("q2", "d1") is None  # another collection
        assert store.collections() == ["default", "other"]


def test_labels_are_checked_on_their_scale(tmp_path: Path) -> None:
    with LabelStore(tmp_path / "l.sqlite") as store:
        with pytest.raises(InputError, match="binary scale"):
            store.put(Label("q1", "d1", 2, "ann"))
        store.put(Label("q1", "d1", 2, "ann", scale="graded"))
        with pytest.raises(InputError, match="reviewer"):
            store.put(Label("q1", "d1", 1, ""))


def test_query_text_guard_keeps_same_id_queries_of_other_data_apart() -> None:
    labels = LabelSet([Label("q1", "d1", 1, "ann", query="感冒吃什么药")])
    assert labels.lookup("q1", "d1", "感冒吃什么药") is not None
    assert labels.lookup("q1", "d1", "another data set's q1") is None
    assert labels.lookup("q1", "d1") is not None  # no query text given: qid + docno decide


def test_threads_share_one_store(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "l.sqlite")

    def work(n: int) -> None:
        for i in range(20):
            store.put(Label(f"q{n}", f"d{i}", i % 2, f"r{n}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.count() == 80 and len(store.history()) == 80
    store.close()


def test_qrels_and_jsonl_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "in.qrels"
    src.write_text("q1 0 d1 2\nq1 0 d2 0\nq2 0 d9 3\nq2 0 d8 -1\n", encoding="utf-8")
    labels = read_label_file(src, reviewer="nist")
    assert {(x.qid, x.docno, x.label, x.scale) for x in labels} == {
        ("q1", "d1", 2, "graded"),
        ("q1", "d2", 0, "graded"),
        ("q2", "d9", 3, "graded"),
    }
    with LabelStore(tmp_path / "l.sqlite") as store:
        store.put_many(labels)
        out = tmp_path / "out.qrels"
        assert labels_to_qrels(store.label_set(), out) == 3
        assert sorted(out.read_text().splitlines()) == ["q1 0 d1 2", "q1 0 d2 0", "q2 0 d9 3"]
        jl = tmp_path / "out.jsonl"
        assert labels_to_jsonl(store.latest(), jl) == 3
    again = read_label_file(jl)
    assert {(x.qid, x.docno, x.label, x.reviewer, x.scale) for x in again} == {
        (x.qid, x.docno, x.label, x.reviewer, x.scale) for x in labels
    }
    binary = tmp_path / "b.qrels"
    assert labels_to_qrels(LabelSet(again), binary, scale="binary", level=2) == 3
    assert sorted(binary.read_text().splitlines()) == ["q1 0 d1 1", "q1 0 d2 0", "q2 0 d9 1"]
    with pytest.raises(ScaleError, match=r"graded .* binary"):
        labels_to_qrels(LabelSet(again), binary, scale="binary")


def test_label_files_name_the_bad_place(tmp_path: Path) -> None:
    q = tmp_path / "x.qrels"
    q.write_text("q1 0 d1 1\n", encoding="utf-8")
    with pytest.raises(InputError, match="reviewer"):
        read_label_file(q)
    q.write_text("q1 0 d1 3\n", encoding="utf-8")
    with pytest.raises(InputError, match="binary scale"):
        read_label_file(q, reviewer="a", scale="binary")
    j = tmp_path / "x.jsonl"
    j.write_text(json.dumps({"qid": "q1", "docno": "d1", "label": 1, "reviewer": "a", "colour": 1}) + "\n")
    with pytest.raises(InputError) as err:
        read_label_file(j)
    assert err.value.line == 1 and err.value.field == "colour"
    j.write_text('{"qid": "q1", "docno": "d1", "label": 5, "reviewer": "a", "scale": "graded"}\n')
    with pytest.raises(InputError, match="graded scale"):
        read_label_file(j)


@pytest.mark.parametrize(
    ("second_line", "line", "field", "message"),
    [
        (b'{"qid": "\xff"}\n', 2, None, "invalid UTF-8"),
        (b'{"qid": "q\\ud800", "docno": "d2", "label": 1, "reviewer": "a"}\n', 2, "qid", "lone surrogate"),
        (b'{"qid": "q2", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n", 2, "x", "nested deeper than 64"),
    ],
)
def test_hostile_jsonl_lines_are_input_errors_naming_the_line(
    tmp_path: Path, second_line: bytes, line: int, field: str | None, message: str
) -> None:
    j = tmp_path / "x.jsonl"
    good = json.dumps({"qid": "q1", "docno": "d1", "label": 1, "reviewer": "a"}).encode() + b"\n"
    j.write_bytes(good + second_line)
    with pytest.raises(InputError, match=message) as err:
        read_label_file(j)
    assert (err.value.line, err.value.field) == (line, field)


def test_named_calibrations(tmp_path: Path) -> None:
    with LabelStore(tmp_path / "l.sqlite") as store:
        store.save_calibration(Calibration("team-a", "binary.zh.v2", 0.61, "abc", 0.575, report={"n": 40}))
        cal = store.calibration("team-a")
        assert cal is not None and cal.threshold == 0.61 and cal.report == {"n": 40} and cal.created > 0
        assert store.calibration("nope") is None
        assert [c.name for c in store.calibrations()] == ["team-a"]


def test_the_verdict_cache_never_stores_a_human_verdict_and_rows_keep_their_old_shape(tmp_path: Path) -> None:
    from judge.judging import PassageVerdict, apply_label
    from judge.store import SQLiteVerdictStore

    v = PassageVerdict(index=0, verdict="no", p_yes=0.4, template_id="t", template_hash="h", backend="b")
    store = SQLiteVerdictStore(tmp_path / "c.sqlite")
    store.put_sync("human", apply_label(v, 1, mode="binary", reviewer="ann"))
    store.put_sync("judge", v)
    assert store.get_sync("human") is None and store.get_sync("judge") == v
    store.close()
    row = sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT verdict FROM verdicts").fetchone()[0]
    assert not {"source", "reviewer", "replaced"} & set(json.loads(row))


def test_a_label_carrying_an_inclusion_below_the_floor_is_refused() -> None:
    from judge.store import check_label_fields

    base = {"qid": "q", "docno": "d", "label": 1, "reviewer": "ann", "scale": "binary"}
    assert check_label_fields({**base, "inclusion": 1e-6})["inclusion"] == 1e-6
    with pytest.raises(InputError) as err:
        check_label_fields({**base, "inclusion": 1e-320}, line=3)
    assert err.value.field == "inclusion" and err.value.line == 3
