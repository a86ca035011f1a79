"""rlvr.runs: the code state a run records (patches/)."""

from __future__ import annotations

import os
import subprocess
import tarfile

from rlvr import runs


def test_untracked_files_with_any_name_reach_the_patch_tarball(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "tracked.py").write_text("x = 1\n")
    subprocess.run(git + ["add", "tracked.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    names = ["plain.py", "résumé.py", "with space.py", 'quote".py', "tab\there.py", "new\nline.py"]
    for n in names:
        (repo / n).write_text("y = 2\n")
    with open(os.path.join(os.fsencode(repo), b"bytes\xff.py"), "w") as fh:
        fh.write("z = 3\n")
    monkeypatch.setattr(runs, "code_repo", lambda: str(repo))
    info = runs.write_patches(str(tmp_path / "run"))
    assert info["dirty"] is True
    with tarfile.open(tmp_path / "run" / "patches" / "untracked.tar.gz") as tar:
        got = set(tar.getnames())
    assert got == set(names) | {os.fsdecode(b"bytes\xff.py")}, got
