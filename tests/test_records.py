"""The record module: validation with FILE:LINE, keep-going error records, resumable outputs."""

from __future__ import annotations

import pytest

from rlvr.records import RecordError, RecordWriter, check_record, open_resumable, read_records


def write(tmp_path, text, name="in.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_reads_in_order_and_passes_unknown_fields(tmp_path):
    p = write(tmp_path, '{"id": "a", "x": {"deep": [1, 2]}}\n\n{"id": "b", "prompt": [{"role": "user", "content": "hi"}]}\n')
    recs = list(read_records([p]))
    assert [r["id"] for r in recs] == ["a", "b"]
    assert recs[0]["x"] == {"deep": [1, 2]}


@pytest.mark.parametrize("line,field", [
    ('{"id": 1}', "id"),
    ('{"id": "a", "prompt": 5}', "prompt"),
    ('{"id": "a", "prompt": [{"role": "user"}]}', "prompt[0]"),
    ('{"id": "a", "verifier": "chess"}', "verifier"),
    ('{"id": "a", "completions": ["x"], "rewards": [1, 0]}', "rewards"),
    ('{"id": "a", "completions": ["x"], "rewards": ["1"]}', "rewards"),
    ('{"id": "a", "completions": ["x"], "verdicts": [{"status": "great"}]}', "verdicts[0].status"),
    ('{"id": "a", "instruction_id_list": ["x"], "kwargs": [{}, {}]}', "kwargs"),
    ('{"id": "a", "tests": "assert 1"}', "tests"),
    ('[1, 2]', None),
])
def test_bad_fields_are_named_with_file_and_line(tmp_path, line, field):
    p = write(tmp_path, '{"id": "ok"}\n' + line + "\n")
    with pytest.raises(RecordError) as ei:
        list(read_records([p]))
    e = ei.value
    assert (e.path, e.line, e.field) == (p, 2, field)
    assert str(e).startswith(f"{p}:2: ")


def test_keep_going_turns_bad_lines_into_error_records(tmp_path):
    p = write(tmp_path, '{"id": "a"}\nnot json\n{"id": 3}\n{"id": "d"}\n')
    recs = list(read_records([p], keep_going=True))
    assert len(recs) == 4
    assert recs[1]["error"]["line"] == 2 and recs[1]["error"]["raw"] == "not json\n"
    assert recs[2]["error"]["field"] == "id"
    assert recs[3]["id"] == "d"


def test_required_fields(tmp_path):
    p = write(tmp_path, '{"id": "a", "rewards": []}\n{"id": "b"}\n')
    with pytest.raises(RecordError) as ei:
        list(read_records([p], required=("rewards",)))
    assert ei.value.line == 2 and ei.value.field == "rewards"


def test_check_record_accepts_a_full_record():
    rec = {"id": "x", "dataset": "gsm8k", "prompt": "q", "verifier": "math", "answer": "3",
           "completions": ["a", "b"], "rewards": [1.0, 0], "verdicts": [{"status": "correct"}, {"status": "wrong"}]}
    assert check_record(rec) is None


def test_resumable_output_cuts_a_torn_last_line(tmp_path):
    p = tmp_path / "out.jsonl"
    p.write_bytes(b'{"id": "a"}\n{"id": "b"}\n{"id": "c", "compl')
    done, fh = open_resumable(str(p))
    assert [r["id"] for r in done] == ["a", "b"]
    w = RecordWriter(fh)
    w.write({"id": "c"})
    w.close()
    assert p.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n{"id":"c"}\n'


def test_resumable_output_new_file(tmp_path):
    done, fh = open_resumable(str(tmp_path / "sub" / "o.jsonl"))
    fh.close()
    assert done == []


def test_integers_beyond_64_bits_pass_through_exactly(tmp_path):
    from rlvr.records import dumps

    p = write(tmp_path, '{"id": "a", "h": 123456789012345678901234567890, "n": -9223372036854775809}\n')
    rec = next(read_records([p]))
    assert rec["h"] == 123456789012345678901234567890 and rec["n"] == -9223372036854775809
    assert dumps(rec) == b'{"id":"a","h":123456789012345678901234567890,"n":-9223372036854775809}\n'


def test_byte_order_mark_and_crlf_line_ends_are_read(tmp_path):
    # files saved by Windows editors: a UTF-8 BOM before the first line, CRLF line ends
    f = tmp_path / "win.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id": "a", "rewards": [1]}\r\n{"id": "b", "rewards": [0]}\r\n')
    assert [r["id"] for r in read_records([str(f), str(f)])] == ["a", "b", "a", "b"]
    g = tmp_path / "mid.jsonl"   # a BOM anywhere else is still bad input
    g.write_bytes(b'{"id": "a"}\n\xef\xbb\xbf{"id": "b"}\n')
    with pytest.raises(RecordError, match=":2:"):
        list(read_records([str(g)]))


def test_one_json_writer_keeps_big_integers_in_every_layout(tmp_path):
    import json

    import numpy as np

    from rlvr.records import to_json, write_json

    obj = {"seed": 2**70, "n": np.int64(3), "text": "é"}
    assert json.loads(to_json(obj)) == {"seed": 2**70, "n": 3, "text": "é"}
    pretty = to_json(obj, indent=True).decode()
    assert "\n  " in pretty and json.loads(pretty)["seed"] == 2**70
    assert to_json({"a": 1}, indent=True) == b'{\n  "a": 1\n}'
    write_json(str(tmp_path / "s.json"), {"big": -(2**80)})
    assert (tmp_path / "s.json").read_text() == '{\n  "big": -1208925819614629174706176\n}\n'


def test_atomic_file_leaves_nothing_behind_on_error(tmp_path):
    from rlvr.records import atomic_file, atomic_write

    path = tmp_path / "sub" / "f.bin"
    atomic_write(str(path), b"old")
    with pytest.raises(RuntimeError):
        with atomic_file(str(path)) as fh:
            fh.write(b"half")
            raise RuntimeError("crash while writing")
    assert path.read_bytes() == b"old" and sorted(p.name for p in path.parent.iterdir()) == ["f.bin"]
    with atomic_file(str(path)) as fh:
        fh.write(b"new")
    assert path.read_bytes() == b"new"


def test_run_manifest_and_traces_keep_big_integers(tmp_path):
    import json

    from rlvr.runs import Traces, update_manifest, write_manifest

    write_manifest(str(tmp_path), ["rlvr-train"], {"seed": 2**65})
    update_manifest(str(tmp_path), status="ok")
    man = json.loads((tmp_path / "run.json").read_text())
    assert man["seed"] == 2**65 and man["status"] == "ok"
    t = Traces(str(tmp_path))
    t.metrics({"step": 1, "id_hash": 2**64 + 1})
    t.close()
    assert json.loads((tmp_path / "traces" / "trace.jsonl").read_text())["id_hash"] == 2**64 + 1


@pytest.mark.parametrize("bad", [b"NaN", b"-Infinity", b"1e400", b'"a\\ud800b"', b'"\xff"', b"1" + b"0" * 5000,
                                 b"[" * 5000 + b"]" * 5000])
def test_a_big_integer_elsewhere_on_the_line_does_not_let_invalid_json_in(tmp_path, bad):
    # integers beyond 64 bits go through another parser: it must refuse what orjson refuses
    for line in (b'{"id": "a", "x": ' + bad + b"}", b'{"id": "a", "seed": 123456789012345678901, "x": ' + bad + b"}"):
        p = tmp_path / "in.jsonl"
        p.write_bytes(b'{"id": "ok"}\n' + line + b"\n")
        with pytest.raises(RecordError, match=r"in\.jsonl:2: invalid JSON"):
            list(read_records([str(p)]))
        bad_rec = list(read_records([str(p)], keep_going=True))[1]["error"]
        assert bad_rec["line"] == 2 and "invalid JSON" in bad_rec["message"]


def test_the_big_integer_writer_writes_nan_as_null_like_orjson():
    from rlvr.records import loads, to_json

    for indent in (False, True):
        out = to_json({"seed": 2**70, "loss": float("nan"), "x": [float("inf"), 1.5]}, indent=indent)
        assert loads(out) == {"seed": 2**70, "loss": None, "x": [None, 1.5]}


def test_resumable_output_is_checked_before_it_is_changed(tmp_path):
    p = tmp_path / "out.jsonl"
    text = b'{"id": "a"}\n{"id": "b"}\n{"id": "c", "compl'
    p.write_bytes(text)

    def refuse(done):
        assert [r["id"] for r in done] == ["a", "b"]
        raise ValueError("not this run's file")

    with pytest.raises(ValueError, match="not this run's"):
        open_resumable(str(p), check=refuse)
    assert p.read_bytes() == text   # the torn line of a file that is not ours is not cut
    p.write_bytes(b'{"id": "a"}\n[1, 2]\n{"id": "c"}\n')   # not an object: cut from there, never a crash later
    done, fh = open_resumable(str(p))
    fh.close()
    assert done == [{"id": "a"}] and p.read_bytes() == b'{"id": "a"}\n'


def test_resumable_output_has_one_writer_at_a_time(tmp_path):
    from rlvr.errors import Failure

    p = str(tmp_path / "out.jsonl")
    done, fh = open_resumable(p, exclusive=True)
    with pytest.raises(Failure, match="another process is writing"):
        open_resumable(p, exclusive=True)   # the same command started twice would interleave its records
    w = RecordWriter(fh)
    w.write({"id": "a"})
    w.close()   # closed: the next run may resume it
    done, fh = open_resumable(p)
    fh.close()
    assert done == [{"id": "a"}]


def test_closed_standard_input_is_one_line_naming_it(tmp_path, monkeypatch):
    import sys

    from rlvr.records import InputFileError

    monkeypatch.setattr(sys, "stdin", None)   # what Python gives a command started with `<&-`
    with pytest.raises(InputFileError, match=r"^<stdin>: cannot read: standard input is closed$"):
        list(read_records(["-"]))
    p = write(tmp_path, '{"id": "a"}\n')
    assert [r["id"] for r in read_records([p])] == ["a"]   # a named file needs no stdin
