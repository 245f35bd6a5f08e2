"""``--grid`` parsing, grid points, configuration names (no engine, no judge)."""

from __future__ import annotations

import pytest

from judge.cli import main
from judge.io import InputError
from judge.systems import parse_grid
from judge.systems._sweep_space import (
    grid_points,
    parse_knob,
    parse_value,
    point_name,
    unique_names,
    varying_knobs,
)


def test_values_are_read_as_toml() -> None:
    assert parse_value("0.9") == 0.9 and isinstance(parse_value("0.9"), float)
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("true") is True
    assert parse_value("bm25+") == "bm25+"
    with pytest.raises(InputError) as err:
        parse_value("inf")
    assert err.value.field == "--grid"


def test_list_and_range_knobs() -> None:
    k = parse_knob("k1=0.6,0.9,1.2")
    assert k.name == "k1" and k.values == (0.6, 0.9, 1.2) and not k.is_range
    r = parse_knob("k1=0.6:1.5")
    assert r.is_range and (r.low, r.high, r.integer) == (0.6, 1.5, False)
    assert parse_knob("n=1:5").integer


@pytest.mark.parametrize(
    "item",
    ["k1", "k1=", "=0.3", "k1=0.3,0.3", "k1=1.5:0.6", "k1=a:b", "1x=2", "k 1=2"],
)
def test_bad_knobs_name_the_flag(item: str) -> None:
    with pytest.raises(InputError) as err:
        parse_knob(item)
    assert err.value.field == "--grid"


def test_a_range_needs_trials_and_a_knob_is_given_once() -> None:
    with pytest.raises(InputError, match="--trials"):
        parse_grid(["k1=0.6:1.5"])
    assert parse_grid(["k1=0.6:1.5"], trials=True)[0].is_range
    with pytest.raises(InputError, match="twice"):
        parse_grid(["k1=1", "k1=2"])
    # a Python mapping: lists are values, a 2-tuple a range
    knobs = parse_grid({"k1": [0.6, 0.9], "b": (0.2, 0.8)}, trials=True)
    assert knobs[0].values == (0.6, 0.9) and knobs[1].is_range


def test_grid_points_first_knob_slowest_and_names() -> None:
    points = grid_points(parse_grid(["k1=0.6,0.9", "b=0.3,0.75"]))
    assert points == [
        {"k1": 0.6, "b": 0.3},
        {"k1": 0.6, "b": 0.75},
        {"k1": 0.9, "b": 0.3},
        {"k1": 0.9, "b": 0.75},
    ]
    assert point_name("bm25", points[1]) == "bm25-k1_0.6-b_0.75"
    assert point_name("my engine", {"method": "bm25+", "q": "a/b"}) == "my_engine-method_bm25+-q_a_b"
    assert point_name("x", {"k1": 0.123456789}) == "x-k1_0.1235"
    assert unique_names(["a", "a", "b", "a"]) == ["a", "a-2", "b", "a-3"]


def test_varying_knobs() -> None:
    assert varying_knobs([{"k1": 1, "b": 2}, {"k1": 1, "b": 3}]) == ["b"]
    assert varying_knobs([{"k1": 1}, {"k1": 2, "b": 3}]) == ["k1", "b"]
    assert varying_knobs([{"k1": 1}]) == []
    assert varying_knobs([]) == []


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--grid", "k1"], "--grid"),
        (["--grid", "k1=0.6:1.5"], "--grid"),
        (["--grid", "k1=0.6", "--trials", "1"], "--trials"),
        ([], "--config"),
    ],
)
def test_cli_bad_grid_is_exit_2_naming_the_flag(
    tmp_path, capsys: pytest.CaptureFixture[str], args: list[str], flag: str
) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "x"}\n', encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text('engine = "embedded"\nindex = "nowhere"\n', encoding="utf-8")
    base = [] if flag == "--config" else ["--config", str(config)]
    code = main(["experiment", str(queries), *base, *args, "-o", str(tmp_path / "out"), "--quiet"])
    assert code == 2
    assert f"'{flag}'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing searched, nothing written


@pytest.mark.parametrize("grid", [["--grid", "boost=1.0"], ["--grid", "boost=1.0", "--grid", "size=3"]])
def test_a_grid_of_one_configuration_is_exit_2_naming_grid_before_any_search(
    tmp_path, capsys: pytest.CaptureFixture[str], grid: list[str]
) -> None:
    """One point and no other --config is one configuration: nothing to compare. Refused
    before the engine is asked anything (the loopback engine sees no request) or a run is
    written, naming --grid; an experiment of two points is not refused by this check."""
    from _search_stub import SearchStub, serve

    stub = SearchStub({"/idx/_search": {"hits": {"hits": []}}})
    with serve(stub):
        config = tmp_path / "c.toml"
        config.write_text(
            f'engine = "http"\nurl = "{stub.url}/idx/_search"\nmethod = "POST"\n'
            'body = \'{"size": {{depth}}, "q": {{query|json}}, "boost": {{boost}}, "n": {{size}}}\'\n'
            "[params]\nboost = 1.0\nsize = 3\n"
            '[response]\nids = "hits.hits[*]._id"\ntext = "hits.hits[*]._source.text"\n',
            encoding="utf-8",
        )
        queries = tmp_path / "q.jsonl"
        queries.write_text('{"id": "q1", "query": "x"}\n', encoding="utf-8")
        out = tmp_path / "out"
        args = ["experiment", str(queries), "--config", str(config), "-o", str(out), "--quiet"]
        qrels = tmp_path / "labels.qrels"
        qrels.write_text("q1 0 d1 1\n", encoding="utf-8")
        code = main([*args, *grid, "--backend", f"qrels:{qrels}"])
        err = capsys.readouterr().err
        assert code == 2
        assert "field '--grid'" in err and "two configurations or more" in err
        assert stub.seen == [] and not out.exists()
        # a second configuration given beside the one point: two configurations, checked further
        from judge.systems import ExperimentOptions

        two = ExperimentOptions(configs=(config, config), grid=("boost=1.0",))
        assert [k.name for k in two.check()] == ["boost"]
