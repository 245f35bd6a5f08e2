"""Migration 5: calibration rows an older judge (or another writer) stored unchecked move to
``calibration_quarantine`` with the field and the problem, as migration 3 does for labels;
``save_calibration`` refuses what the migration would quarantine."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from judge.io import InputError
from judge.store import Calibration, LabelStore
from judge.store._label_schema import LABEL_SCHEMA_VERSION

GOOD_REPORT = '{"helps": true}'
ROWS: list[tuple[object, ...]] = [  # name, template_id, template_hash, threshold, previous, created, report
    (b"good", b"binary.en.v1", b"abc", 0.6, 0.5, 100.0, GOOD_REPORT),
    (b"bad\xff", b"binary.en.v1", None, 0.6, None, 101.0, GOOD_REPORT),  # name not UTF-8
    (b"latin", b"caf\xe9", None, 0.6, None, 102.0, GOOD_REPORT),  # template id in Latin-1
    (b"high", b"binary.en.v1", None, 1.5, None, 103.0, GOOD_REPORT),
    (b"word", b"binary.en.v1", None, "high", None, 104.0, GOOD_REPORT),  # text in a REAL column
    (b"never", b"binary.en.v1", None, 0.4, None, math.inf, GOOD_REPORT),
    (b"garbled", b"binary.en.v1", None, 0.4, None, 105.0, "{not json"),
    (b"listed", b"binary.en.v1", None, 0.4, None, 106.0, "[1, 2]"),
    (b"below", b"binary.en.v1", None, 0.4, -0.1, 107.0, GOOD_REPORT),
    (b"also-good", b"graded.zh.v2", None, 0.0, None, 108.0, "{}"),
]


def _version_4_store(path: Path) -> None:
    """A store at schema version 4 (this judge before migration 5), calibrations as the
    rows above: SQLite keeps whatever it is given."""
    from judge.store._label_schema import LABEL_MIGRATIONS

    conn = sqlite3.connect(path, isolation_level=None)
    for migration in LABEL_MIGRATIONS[:4]:
        migration(conn)
    conn.execute("PRAGMA user_version = 4")
    for row in ROWS:
        conn.execute(
            "INSERT INTO calibrations VALUES "
            "(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?, CAST(? AS TEXT))",
            row,
        )
    conn.close()


def test_migration_5_quarantines_calibrations_that_cannot_be_read_or_used(tmp_path: Path) -> None:
    path = tmp_path / "labels.sqlite"
    _version_4_store(path)
    with LabelStore(path) as store:
        assert store.schema_found == 4
        assert [c.name for c in store.calibrations()] == ["also-good", "good"]
        good = store.calibration("good")
        assert good is not None and (good.threshold, good.previous_threshold) == (0.6, 0.5)
        assert good.report == {"helps": True} and good.template_hash == "abc"
        assert store.calibration("high") is None
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT row, field, problem FROM calibration_quarantine ORDER BY rowid").fetchall()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == LABEL_SCHEMA_VERSION == 6
    conn.close()
    assert [(json.loads(r)["name"], f) for r, f, _ in rows] == [
        ("b'bad\\xff'", "name"),
        ("latin", "template_id"),
        ("high", "threshold"),
        ("word", "threshold"),
        ("never", "created"),
        ("garbled", "report"),
        ("listed", "report"),
        ("below", "previous_threshold"),
    ]
    problems = {json.loads(r)["name"]: p for r, _, p in rows}
    assert problems["b'bad\\xff'"] == "text that is not UTF-8 (byte 0xff at 3)"
    assert problems["latin"] == "text that is not UTF-8 (byte 0xe9 at 3)"
    assert problems["high"] == "must be a finite number in [0, 1], got 1.5"
    assert problems["word"] == "must be a number, got str"
    assert problems["never"] == "must be a finite time in seconds since 1970"
    assert problems["garbled"].startswith("not JSON (")
    assert problems["listed"] == "must be an object, got list"


def test_an_empty_calibrations_table_migrates_to_an_empty_quarantine(tmp_path: Path) -> None:
    from judge.store._label_schema import LABEL_MIGRATIONS

    path = tmp_path / "labels.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    for migration in LABEL_MIGRATIONS[:4]:
        migration(conn)
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    with LabelStore(path) as store:
        assert store.calibrations() == []
        store.save_calibration(Calibration("c", "binary.zh.v2", 0.6))
        assert [c.name for c in store.calibrations()] == ["c"]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM calibration_quarantine").fetchone() == (0,)
    conn.close()


@pytest.mark.parametrize(
    ("calibration", "field"),
    [
        (Calibration("c", "t", 1.5), "threshold"),
        (Calibration("c", "t", math.nan), "threshold"),
        (Calibration("c", "t", 0.5, previous_threshold=math.inf), "previous_threshold"),
        (Calibration("c", "t", 0.5, created=math.inf), "created"),
        (Calibration(" ", "t", 0.5), "name"),
        (Calibration("c", "t", 0.5, report=[1]), "report"),  # type: ignore[arg-type]
    ],
)
def test_save_refuses_what_the_migration_would_quarantine(
    tmp_path: Path, calibration: Calibration, field: str
) -> None:
    with LabelStore(tmp_path / "labels.sqlite") as store:
        with pytest.raises(InputError) as err:
            store.save_calibration(calibration)
        assert err.value.field == field
        assert store.calibrations() == []
    with LabelStore(tmp_path / "labels.sqlite") as store:  # the bounds themselves are kept
        store.save_calibration(Calibration("edge", "t", 1.0, previous_threshold=0.0))
        assert store.calibration("edge") is not None
