"""A job's S3 layout, and the uploads that put a run folder into it while the job runs.

    s3://BUCKET/PREFIX/checkpoints/<job>/
      config.yaml, run.json, RESULTS.md    the run folder's top files
      traces/                              trace.jsonl, samples.jsonl, rollouts.jsonl (every few seconds)
      evals/                               rlvr-eval --watch results, when the job runs one
      <run>_step<N>/                       each complete checkpoint (a Hugging Face folder)
      <run>_final/                         the last checkpoint, once training has ended
      output/model.tar.gz                  SageMaker's archive of $SM_MODEL_DIR, at the end

`rlvr-s3-sync pull s3://BUCKET/PREFIX/checkpoints/<job> results/` brings all of it back
(model.tar.gz unpacked in place) and `rlvr-s3-sync watch <job> --src s3://BUCKET/PREFIX/checkpoints/`
follows traces/trace.jsonl and config.yaml.

This module only maps run-folder paths to those keys; the transfers are rlvr.s3's
BackgroundUploader (change detection, multipart, retries, off the training thread): one for
the run folder's files (root = the run folder, so traces/ -> <job>/traces/), one per
checkpoint (root = the checkpoint, so it lands under <run>_step<N>/), each checkpoint's
completeness marker sent after its weights.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from rlvr.runs import COMPLETE, list_checkpoints

LIVE = ("traces", "evals", "config.yaml", "run.json", "RESULTS.md")  # run-folder paths kept current


@dataclass(frozen=True)
class JobLayout:
    jobs_uri: str   # s3://BUCKET/PREFIX/checkpoints/
    job: str
    run: str        # the run folder's name, <config_stem>_<timestamp>

    @property
    def root(self) -> str:
        return f"{self.jobs_uri.rstrip('/')}/{self.job}/"

    def checkpoint(self, step: int) -> str:
        return f"{self.root}{self.run}_step{step}/"

    @property
    def final(self) -> str:
        return f"{self.root}{self.run}_final/"

    @property
    def traces(self) -> str:
        return f"{self.root}traces/"


class JobSync:
    """Keeps a job's S3 layout current with a run folder, on background threads.

    start() polls every `interval` seconds: the run folder's live files (traces, evals, the
    top files) are submitted to one uploader, each new complete checkpoint to its own.
    finish() does a last poll, uploads the newest checkpoint as <run>_final/, waits for every
    upload and returns the failures [(path, message)]. Nothing here raises into the caller's
    loop: failed uploads are warned about on stderr and retried at the next poll.
    """

    def __init__(self, run_dir: str, layout: JobLayout, interval: float = 10.0, *, transfer=None,
                 log: Callable[[str], None] | None = None):
        from rlvr.s3 import BackgroundUploader, S3Transfer

        self.run_dir = os.path.abspath(run_dir)
        self.layout = layout
        self.interval = interval
        self._own_transfer = transfer is None
        self.transfer = transfer or S3Transfer(workers=8)  # one client shared by every uploader
        self.log = log or (lambda m: print(f"rlvr-cloud: {m}", file=sys.stderr, flush=True))
        self._meta = BackgroundUploader(layout.root, root=self.run_dir, transfer=self.transfer)
        self._checkpoints: dict[int, object] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _uploader(self, dest: str, root: str):
        from rlvr.s3 import BackgroundUploader

        # the completeness marker goes up last: a copy on S3 is never complete before it is
        return BackgroundUploader(dest, root=root, transfer=self.transfer, last=[COMPLETE])

    def poll(self) -> None:
        with self._lock:
            for rel in LIVE:
                path = os.path.join(self.run_dir, rel)
                if os.path.exists(path):
                    self._meta.submit(path)
            for step, path in list_checkpoints(self.run_dir):
                if step not in self._checkpoints:
                    up = self._uploader(self.layout.checkpoint(step), path)
                    up.submit(path)
                    self._checkpoints[step] = up
                    self.log(f"uploading checkpoint {os.path.basename(path)} to {self.layout.checkpoint(step)}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - the sync must never take the job down
                self.log(f"warning: sync poll failed: {type(e).__name__}: {e}")

    def start(self) -> "JobSync":
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="rlvr-job-sync", daemon=True)
        self._thread.start()
        return self

    def finish(self, timeout: float | None = 3600) -> list[tuple[str, str]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()
        failed: list[tuple[str, str]] = []
        cks = list_checkpoints(self.run_dir)
        final = None
        if cks:
            final = self._uploader(self.layout.final, cks[-1][1])
            final.submit(cks[-1][1])
            self.log(f"uploading the final checkpoint {os.path.basename(cks[-1][1])} to {self.layout.final}")
        for up in [self._meta, *self._checkpoints.values(), *([final] if final else [])]:
            failed += up.close(timeout=timeout)
        if self._own_transfer and not failed:
            self.transfer.close()
        return failed
