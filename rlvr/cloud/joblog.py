"""The job log: one Markdown table row per submission, so opaque job names keep their meaning.

    | job | config | description | submitted (UTC) | where |

docs/job_log.md by default (rlvr-submit --job-log or RLVR_JOB_LOG to change it). Rows are
appended with one write under an exclusive lock, so concurrent submissions never interleave.
"""

from __future__ import annotations

import datetime as _dt
import os

DEFAULT_LOG = os.path.join("docs", "job_log.md")
HEADER = ("# Job log\n\nOne row per `rlvr-submit` (newest last): the job name, the config it ran, what it was for.\n\n"
          "| job | config | description | submitted (UTC) | where |\n|---|---|---|---|---|\n")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") or " "


def append(path: str, job: str, config: str, description: str = "", where: str = "",
           when: _dt.datetime | None = None) -> str:
    """Append one row (creating the file with its header); return the row."""
    import fcntl

    when = when or _dt.datetime.now(_dt.timezone.utc)
    row = "| " + " | ".join(_cell(c) for c in (job, config, description, when.strftime("%Y-%m-%d %H:%M:%S"),
                                                where)) + " |\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.seek(0)
        text = fh.read()
        out = ""
        if not text.strip():
            out = HEADER
        elif not text.endswith("\n"):
            out = "\n"
        fh.write(out + row)
        fh.flush()
        os.fsync(fh.fileno())
    return row


def rows(path: str) -> list[dict[str, str]]:
    """The rows of a job log as dicts (job, config, description, submitted, where)."""
    keys = ("job", "config", "description", "submitted", "where")
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| job |"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in _split_row(line)]
        if len(cells) == len(keys):
            out.append(dict(zip(keys, cells)))
    return out


def _split_row(line: str) -> list[str]:
    cells, cur, i = [], "", 1
    body = line[1:-1] if line.endswith("|") else line[1:]
    while i <= len(body):
        ch = body[i - 1]
        if ch == "\\" and i < len(body) and body[i] == "|":
            cur += "\\|"
            i += 2
            continue
        if ch == "|":
            cells.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur)
    return cells
