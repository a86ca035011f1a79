"""boto3 sessions and clients for the cloud commands, with AWS errors turned into one line.

Credentials and the region come from boto3's standard chain (environment, AWS_PROFILE and
~/.aws, container and instance roles); AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>
(boto3's own variables) point a service at another endpoint, e.g. a test server.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from rlvr.errors import Failure, UsageError

T = TypeVar("T")

_CRED_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


def redact(text: str) -> str:
    """The text with the values of the credential variables and any URL user:password@ masked."""
    for var in _CRED_VARS:
        v = os.environ.get(var)
        if v and len(v) >= 4:
            text = text.replace(v, "***")
    return re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s\"']+@", r"\1", text)


class Aws:
    """One boto3 session (region and credentials resolved once) handing out clients."""

    def __init__(self, region: str | None = None, profile: str | None = None):
        import boto3

        try:
            self.session = boto3.session.Session(profile_name=profile, region_name=region)
        except Exception as e:  # noqa: BLE001 - an unknown profile
            raise UsageError(f"cannot set up AWS: {type(e).__name__}: {redact(str(e))}") from None
        self.region = self.session.region_name
        self._clients: dict[str, Any] = {}

    def require_region(self) -> str:
        if not self.region:
            raise UsageError("no AWS region: give --region, or set AWS_DEFAULT_REGION (or a region in ~/.aws/config)")
        return self.region

    def require_credentials(self) -> None:
        try:
            creds = self.session.get_credentials()
        except Exception as e:  # noqa: BLE001 - a broken provider (bad profile, container endpoint)
            raise Failure(f"cannot load AWS credentials: {type(e).__name__}: {redact(str(e))}") from None
        if creds is None:
            raise Failure("no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
                          "or run where an instance role is available)")

    def client(self, service: str):
        if service not in self._clients:
            from botocore.config import Config

            self._clients[service] = self.session.client(
                service, region_name=self.require_region(),
                config=Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=10, read_timeout=60))
        return self._clients[service]

    def account(self) -> str:
        return call(lambda: self.client("sts").get_caller_identity()["Account"], "sts GetCallerIdentity")


def error_code(e: BaseException) -> str | None:
    from botocore.exceptions import ClientError

    if isinstance(e, ClientError):
        return e.response.get("Error", {}).get("Code")
    return None


def call(fn: Callable[[], T], what: str, known: dict[str, str] | None = None) -> T:
    """Run one AWS call; credential, endpoint and service errors become Failure with one line.

    `known` maps error codes to the message to give instead (e.g. a missing repository).
    """
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - every boto error becomes one line; others pass
        raise as_failure(e, what, known) from None


def as_failure(e: BaseException, what: str, known: dict[str, str] | None = None) -> BaseException:
    """The rlvr error for a boto3/botocore exception (other exceptions are returned unchanged)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, PartialCredentialsError

    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return Failure(f"{what}: no usable AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                       "or AWS_PROFILE, or run where an instance role is available)")
    if isinstance(e, NoRegionError):
        return UsageError("no AWS region: give --region, or set AWS_DEFAULT_REGION")
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        if known and err.get("Code") in known:
            return Failure(known[err["Code"]])
        msg = str(err.get("Message") or "").strip().splitlines()[0:1]
        return Failure(f"{what}: {err.get('Code') or 'error'}: {redact(msg[0] if msg else str(e))}")
    if isinstance(e, BotoCoreError):
        return Failure(f"{what}: {type(e).__name__}: {redact(str(e))}")
    return e
