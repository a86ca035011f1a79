"""The boto3 client (credentials from the standard chain) and the classification of its errors:
transient (retried) or not, each turned into one S3Error line without credentials."""

from __future__ import annotations

import http.client
import os
import re

from rlvr.errors import S3Error, S3UsageError

TRANSIENT_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequests",
    "RequestLimitExceeded", "RequestTimeout", "InternalError", "ServiceUnavailable",
    "BadDigest", "XAmzContentSHA256Mismatch", "OperationAborted",
}
AUTH_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
    "ExpiredToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed", "InvalidSecurity",
    "RequestTimeTooSkewed", "AllAccessDisabled",
}



def make_client(endpoint_url: str | None = None, region: str | None = None, profile: str | None = None,
                max_pool: int = 16, connect_timeout: float = 5, read_timeout: float = 60):
    """A boto3 S3 client from the standard credential chain (env, profile, instance role).

    `endpoint_url` (or AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3) points at any S3-compatible
    store; such stores get path-style addressing. boto3's own retries are off: S3Transfer
    retries whole requests itself, with backoff.
    """
    import boto3
    from botocore.config import Config

    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    try:
        session = boto3.session.Session(profile_name=profile) if profile else boto3.session.Session()
    except Exception as e:  # an unknown profile
        raise S3UsageError(f"cannot set up the S3 client: {type(e).__name__}: {scrub(str(e))}") from None
    # Every upload carries Content-MD5, which SigV4 signs and the server checks: no SHA-256 of
    # the body as well (botocore otherwise hashes every byte twice on plain-http endpoints).
    s3cfg = {"addressing_style": os.environ.get("RLVR_S3_ADDRESSING", "path" if endpoint_url else "auto"),
             "payload_signing_enabled": False}
    cfg = Config(
        retries={"total_max_attempts": 1},
        max_pool_connections=max_pool,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        s3=s3cfg,
        # Content-MD5 already protects every upload; the newer CRC trailers (aws-chunked) are
        # not understood by every S3-compatible store. boto3's own variables still decide.
        request_checksum_calculation=os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required"),
        response_checksum_validation=os.environ.get("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required"),
        tcp_keepalive=True,
    )
    region = region or session.region_name or ("us-east-1" if endpoint_url else None)
    try:
        return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=cfg)
    except Exception as e:  # a malformed endpoint URL, an unknown profile
        raise S3UsageError(f"cannot set up the S3 client: {type(e).__name__}: {scrub(str(e))}") from None


def scrub(text: str) -> str:
    """Remove anything credential-like from an error message before it is shown."""
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        v = os.environ.get(var)
        if v and len(v) >= 4:
            text = text.replace(v, "***")
    text = re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s\"']+@", r"\1", text)  # user:password@ in URLs
    return re.sub(r"(Credential=)[^,\s/]+", r"\1***", text)


def is_transient(e: BaseException) -> bool:
    from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError, ResponseStreamingError
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.parsers import ResponseParserError

    try:
        from urllib3.exceptions import HTTPError as Urllib3Error
    except ImportError:  # pragma: no cover
        Urllib3Error = ()  # type: ignore[assignment,misc]
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return err.get("Code") in TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(e, (HTTPClientError, BotoConnectionError, ResponseStreamingError, IncompleteReadError,
                          ResponseParserError, Urllib3Error, http.client.HTTPException, ConnectionError,
                          TimeoutError))


def describe_error(e: BaseException, what: str, endpoint: str) -> S3Error:
    """Turn a boto3/botocore exception into one clear S3Error line."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    if isinstance(e, S3Error):
        return e
    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return S3Error("no usable AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                       "or AWS_PROFILE, or run where an instance role is available)", "NoCredentials")
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        code = str(err.get("Code") or "")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if code in AUTH_CODES or status == 403:
            hint = {
                "InvalidAccessKeyId": "the access key is not known to the server",
                "SignatureDoesNotMatch": "the secret key does not match the access key",
                "RequestTimeTooSkewed": "the local clock is too far off",
            }.get(code, "the credentials lack permission or were rejected")
            return S3Error(f"access denied for {what} at {endpoint} ({code or status}): {hint}; "
                           "check AWS_PROFILE / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY", code or "AccessDenied")
        if code == "NoSuchUpload":
            return S3Error(f"{what}: the multipart upload is gone (NoSuchUpload)", code)
        if code == "NoSuchBucket":
            return S3Error(f"no such bucket for {what} at {endpoint}", code)
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            return S3Error(f"not found: {what}", "NoSuchKey")
        msg = err.get("Message") or ""
        return S3Error(f"{what}: {code or status}{': ' + scrub(str(msg)) if msg else ''}", code or str(status),
                       transient=is_transient(e))
    if is_transient(e):
        return S3Error(f"{what}: cannot reach {endpoint}: {type(e).__name__}: {scrub(str(e))}", type(e).__name__, True)
    return S3Error(f"{what}: {type(e).__name__}: {scrub(str(e))}", type(e).__name__)
