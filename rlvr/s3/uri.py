"""S3 names: s3:// URI parsing, bucket and key checks against S3's rules, safe local paths."""

from __future__ import annotations

import ipaddress
import os
import re
from urllib.parse import urlsplit, urlunsplit

from rlvr.errors import S3UsageError

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_bucket(name: str) -> str:
    """Check an S3 bucket name against the naming rules; return it or raise S3UsageError."""
    why = None
    if not 3 <= len(name) <= 63:
        why = "must be 3 to 63 characters long"
    elif not _BUCKET_RE.match(name):
        why = "may hold only lowercase letters, digits, '.' and '-', and must start and end with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        why = "must not contain '..', '.-' or '-.'"
    elif name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")):
        why = "uses a reserved prefix or suffix"
    else:
        try:
            ipaddress.IPv4Address(name)
            why = "must not look like an IP address"
        except ValueError:
            pass
    if why:
        raise S3UsageError(f"invalid bucket name {name!r}: {why}")
    return name


def validate_key(key: str, what: str = "key") -> str:
    """Check an object key (or prefix): valid UTF-8, at most 1024 bytes, no control characters."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:  # a local file name with bytes that are not UTF-8 (kept as surrogates)
        try:
            shown = key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            shown = key.encode("utf-8", "backslashreplace").decode()
        raise S3UsageError(f"invalid {what} '{shown}': not valid UTF-8 (S3 keys are UTF-8 text)") from None
    if len(key.encode("utf-8")) > 1024:
        raise S3UsageError(f"invalid {what} {key[:60]!r}...: longer than 1024 bytes")
    bad = next((c for c in key if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise S3UsageError(f"invalid {what} {key!r}: contains the control character {bad!r}")
    return key


def parse_uri(uri: str) -> tuple[str, str]:
    """'s3://bucket/some/key' -> ('bucket', 'some/key'); validates both parts."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise S3UsageError(f"not an s3:// URI: {uri!r} (expected s3://BUCKET/KEY)")
    bucket, _, key = uri[5:].partition("/")
    if not bucket:
        raise S3UsageError(f"no bucket in {uri!r} (expected s3://BUCKET/KEY)")
    return validate_bucket(bucket), validate_key(key)


def join_key(prefix: str, rel: str) -> str:
    if not prefix:
        return rel
    return prefix + rel if prefix.endswith("/") else f"{prefix}/{rel}"


def safe_relpath(rel: str) -> str | None:
    """A remote relative key as a safe local relative path, or None (absolute, '..', empty parts)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return None
    if os.sep != "/" and any(os.sep in p for p in parts):
        return None
    return os.path.join(*parts)


def redact_url(url: str | None) -> str:
    if not url:
        return "AWS S3"
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
