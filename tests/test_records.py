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
