"""Where inputs live: a local path, or a URL of a store that pyarrow.fs reads (s3://, gs://, hdfs://, file://), turned
into (filesystem, path in it). Credentials and endpoints come from each store's usual environment, never from gtmkit
options: for S3 and S3-compatible stores the standard AWS_* variables, AWS_ENDPOINT_URL included (read here, as
pyarrow's own URI parsing does not); GCS and HDFS as pyarrow.fs.FileSystem.from_uri configures them. A fsspec file
system is accepted too where a caller passes one."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from ..errors import GtmkitError

URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
CONNECT_TIMEOUT_S = 5.0  # an unreachable endpoint fails in seconds (3 tries), never hangs
REQUEST_TIMEOUT_S = 30.0  # a request that moves no byte this long fails (curl: low speed)
RETRIES = 3


def is_url(path) -> bool:
    return isinstance(path, str) and URL.match(path) is not None


def resolve_input(path):
    """An input as a task elsewhere reads it: a URL unchanged, a local path absolute with ~ and links resolved."""
    if is_url(path):
        return path
    return os.path.realpath(os.path.expanduser(os.fspath(path)))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _s3(error: type, url: str):
    """An S3FileSystem configured from the AWS_* environment; the endpoint (AWS_ENDPOINT_URL_S3, else
    AWS_ENDPOINT_URL) and its http/https scheme read here."""
    import pyarrow.fs as pafs
    kw = {"connect_timeout": CONNECT_TIMEOUT_S, "request_timeout": REQUEST_TIMEOUT_S,
          "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=RETRIES)}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise error(f"{url}: AWS_ENDPOINT_URL {endpoint!r} is not an http:// or https:// address")
        kw.update(endpoint_override=parts.netloc, scheme=parts.scheme)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    try:
        return pafs.S3FileSystem(**kw)
    except (OSError, ValueError) as exc:
        raise error(f"{url}: cannot set up S3 access ({_first_line(exc)})") from None


def locate(path, error: type = GtmkitError, filesystem=None) -> tuple:
    """(pyarrow FileSystem, path in it) of a local path or URL; filesystem: a pyarrow or fsspec file system that
    path lies in instead (then path is that file system's own path)."""
    import pyarrow.fs as pafs
    if filesystem is not None:
        if not isinstance(filesystem, pafs.FileSystem):
            filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
        return filesystem, _strip_scheme(str(path))
    if not is_url(path):
        return pafs.LocalFileSystem(), os.fspath(path)
    scheme = URL.match(path).group(1).lower()
    if scheme in ("s3", "s3a"):
        inner = inner_path(path)
        if not inner.split("/", 1)[0]:
            raise error(f"{path}: no bucket in the URL (s3://BUCKET/KEY)")
        return _s3(error, path), inner
    if scheme == "file":
        if not path[len("file://"):].startswith("/"):
            raise error(f"{path}: a file:// URL names an absolute path (file:///dir/file)")
        return pafs.LocalFileSystem(), inner_path(path)
    inner = inner_path(path)
    head = path[:len(path) - len(inner)]  # the store's address without the (glob) path: hdfs://host:port, gs://bucket
    if scheme in ("gs", "gcs"):
        head += inner.split("/", 1)[0]
    try:
        fs, _ = pafs.FileSystem.from_uri(head)
    except (pa_errors() + (ValueError,)) as exc:
        raise error(f"{path}: cannot open the store ({_first_line(exc)})") from None
    return fs, inner


def _strip_scheme(path: str) -> str:
    m = URL.match(path)
    return path[m.end():] if m else path


def pa_errors() -> tuple:
    import pyarrow as pa
    return (pa.ArrowException, OSError)


def inner_path(url: str) -> str:
    """A URL's path in the file system locate() gives for it (not urlsplit: a glob's '?' is no query)."""
    scheme, rest = url.split("://", 1)
    if scheme.lower() in ("s3", "s3a", "gs", "gcs"):
        return rest
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else "/"


def read_bytes(path, error: type = GtmkitError, what: str = "file") -> bytes:
    """A URL's object, whole; one-line `error` naming it when it is missing, a folder, or cannot be read."""
    import pyarrow.fs as pafs
    fs, inner = locate(path, error)
    try:
        info = fs.get_file_info(inner)
        if info.type == pafs.FileType.NotFound:
            raise error(f"{path}: no such file")
        if info.type == pafs.FileType.Directory:
            raise error(f"{path}: is a directory, expected a {what}")
        with fs.open_input_stream(inner) as f:
            return f.read()
    except pa_errors() as exc:
        raise error(f"{path}: cannot read {what} ({_first_line(exc)})") from None
