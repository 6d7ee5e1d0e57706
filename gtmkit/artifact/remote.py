"""Artifacts in object storage (docs/format.md, "Reading and writing object storage").

An artifact URL (``s3://bucket/prefix``, or any other URL pyarrow.fs opens) holds the same layout as a local
artifact path: version prefixes ``v-<ns>-<hex>/`` (members and manifest.json) and a ``CURRENT`` object naming the
version served. A writer builds a version locally as always, then uploads its members, then its manifest.json, then
replaces the pointer object last, so a reader never finds a half version behind the pointer. A reader reads the
pointer once, downloads the version it names into a local cache folder (checksums checked on arrival), and opens
that folder as a local artifact, memory-mapped; a version already in the cache is reused, older ones are pruned."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import tempfile

from ..errors import ArtifactError
from . import layout
from .locks import Lock

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
CHUNK = 8 * 1024 * 1024
KEEP = 2  # versions left in the store after a publish: the new one and the one it replaced (readers may still copy it)


def is_url(path) -> bool:
    """True for an object-store URL (``scheme://...``, file:// excepted: that is a local path)."""
    return isinstance(path, str) and bool(URL.match(path)) and not path.lower().startswith("file://")


def normalize(url: str) -> str:
    return url.rstrip("/")


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class Named(str):
    """A version of an artifact URL, said as its URL, with the .name a version directory has and `/` that joins
    object names (pathlib would fold the `//` of the scheme)."""

    def __new__(cls, text: str, name: str):
        self = super().__new__(cls, text)
        self.name = name
        return self

    def __truediv__(self, other):
        return f"{self}/{other}"


def filesystem_for(url: str):
    """(pyarrow FileSystem, path inside it) of an artifact URL, opened as inputs are (inputs/stores.py: the store's
    standard environment, AWS_ENDPOINT_URL included, short connect and request timeouts)."""
    from ..inputs.stores import locate
    fs, path = locate(url, ArtifactError)
    return fs, path.rstrip("/")


def default_cache() -> pathlib.Path:
    """$XDG_CACHE_HOME (or ~/.cache)/gtmkit/artifacts."""
    base = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    return base / "gtmkit" / "artifacts"


def cache_root(url: str, cache=None) -> pathlib.Path:
    """The local artifact folder a URL's versions are downloaded to: <cache>/<readable name>-<hash of the URL>."""
    url = normalize(url)
    base = pathlib.Path(cache) if cache is not None else default_cache()
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[-1])[-60:].strip("_.") or "artifact"
    return base / f"{readable}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def _missing(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, FileNotFoundError) or "NoSuchKey" in text or "Path does not exist" in text \
        or "NoSuchBucket" in text or "does not exist" in text.lower()


def _store_error(url: str, what: str, exc: BaseException) -> ArtifactError:
    return ArtifactError(f"{url}: cannot {what} ({_why(exc)})")


def read_pointer(url: str, fs=None, base=None) -> str | None:
    """The version name the pointer object at url names; None where there is no pointer object."""
    if fs is None:
        fs, base = filesystem_for(url)
    try:
        with fs.open_input_stream(f"{base}/{layout.POINTER}") as f:
            raw = f.read(65)
    except Exception as exc:
        if _missing(exc) and "NoSuchBucket" not in str(exc):
            return None
        raise _store_error(url, "read the version pointer", exc) from None
    name = raw.decode("ascii", "replace").strip()
    if not layout.VERSION.fullmatch(name):
        raise ArtifactError(f"{url}/{layout.POINTER}: does not name a version of this artifact")
    return name


def _no_artifact(url: str, fs, base: str) -> ArtifactError:
    """Why there is no pointer object: no such bucket, or no artifact under an existing prefix."""
    import pyarrow.fs as pafs
    bucket = base.split("/", 1)[0]
    try:
        missing = fs.get_file_info(bucket).type == pafs.FileType.NotFound
    except Exception:
        missing = False
    if missing:
        return ArtifactError(f"{url}: no such bucket ({bucket})")
    return ArtifactError(f"{url}: no gtmkit artifact there (no {layout.POINTER} object)")


def served(url: str) -> str | None:
    return read_pointer(normalize(url))


def check_remote_output(url: str, overwrite: bool) -> str:
    """The URL (normalized) after checking an artifact may be written there: the store answers, and an artifact
    already there is replaced only with overwrite."""
    url = normalize(url)
    fs, base = filesystem_for(url)
    name = read_pointer(url, fs, base)
    if name is not None and not overwrite:
        raise ArtifactError(f"{url}: already exists (pass overwrite=True / --force to replace it)")
    if name is None:
        err = _no_artifact(url, fs, base)
        if "no such bucket" in str(err):  # refused before anything is built
            raise err
    return url


# --- reading ----------------------------------------------------------------------------------------------------

def _download(url, fs, base, name, dest: pathlib.Path) -> None:
    """Copy version `name` into dest (a fresh folder), checking the manifest digest and every member's size and
    sha256 on arrival."""
    from .digest import MANIFEST, digest_problems as _digest_problems
    src = f"{base}/{name}"
    try:
        with fs.open_input_stream(f"{src}/{MANIFEST}") as f:
            text = f.read()
    except Exception as exc:
        if _missing(exc):
            raise FileNotFoundError(f"{url}/{name}/{MANIFEST}") from None
        raise _store_error(url, f"read {name}/{MANIFEST}", exc) from None
    try:
        manifest = json.loads(text.decode("utf-8"))
        files = manifest["files"]
        version = manifest.get("format_version")
        assert isinstance(files, dict)
    except Exception:
        raise ArtifactError(f"{url}/{name}/{MANIFEST}: invalid manifest") from None
    version = version if isinstance(version, int) else 0
    for problem in _digest_problems(Named(f"{url}/{name}", name), manifest, version):
        raise ArtifactError(problem + " (on arrival)")
    for key, e in sorted(files.items()):
        fname = e.get("file") if isinstance(e, dict) else None
        if not isinstance(fname, str) or not layout.MEMBER.fullmatch(fname):
            raise ArtifactError(f"{url}/{name}/{MANIFEST}: invalid entry for file {key!r}")
        h, size = hashlib.sha256(), 0
        try:
            with fs.open_input_stream(f"{src}/{fname}") as f, open(dest / fname, "wb") as out:
                while block := f.read(CHUNK):
                    h.update(block)
                    size += len(block)
                    out.write(block)
        except OSError as exc:
            if _missing(exc):
                raise FileNotFoundError(f"{url}/{name}/{fname}") from None
            raise _store_error(url, f"read {name}/{fname}", exc) from None
        if size != e.get("bytes"):
            raise ArtifactError(f"{url}/{name}/{fname}: has {size} bytes, manifest says {e.get('bytes')} (on arrival)")
        if h.hexdigest() != e.get("sha256"):
            raise ArtifactError(f"{url}/{name}/{fname}: checksum mismatch on arrival, the object is corrupt (sha256 "
                                f"{h.hexdigest()[:12]}..., want {str(e.get('sha256'))[:12]}...)")
    (dest / MANIFEST).write_bytes(text)  # last: a cached version with a manifest is whole


def _sound(vdir: pathlib.Path) -> bool:
    """A cached version is reused when its manifest is there and every member has its recorded size (each was
    checked against its sha256 on arrival; open_artifact's verify=True checks them again)."""
    from .digest import MANIFEST
    try:
        m = json.loads((vdir / MANIFEST).read_text(encoding="utf-8"))
        return all((vdir / e["file"]).stat().st_size == e["bytes"] for e in m["files"].values())
    except Exception:
        return False


def fetch(url: str, cache=None, tries: int = 5) -> pathlib.Path:
    """The local artifact folder (under the cache) whose pointer names the version url serves, downloaded unless
    already there; older cached versions no reader holds are pruned. ArtifactError (one line naming the URL)."""
    url = normalize(url)
    fs, base = filesystem_for(url)
    root = cache_root(url, cache)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArtifactError(f"{root}: cannot create the cache folder for {url} ({exc.strerror or exc})") from None
    last = None
    for _ in range(tries):
        name = read_pointer(url, fs, base)
        if name is None:
            raise _no_artifact(url, fs, base)
        with layout.write_lock(root):
            vdir = root / name
            if not _sound(vdir):
                if vdir.exists():
                    layout.remove_dir(vdir)
                stage = root / layout.new_name(".staging-")
                stage.mkdir()
                lock = Lock(stage).exclusive()
                try:
                    _download(url, fs, base, name, stage)
                    os.rename(stage, vdir)
                except FileNotFoundError as exc:  # the writer pruned it since the pointer was read: read it again
                    layout.remove_dir(stage)
                    if last == name:
                        raise ArtifactError(f"{exc}: missing (the version {layout.POINTER} names)") from None
                    last = name
                    continue
                except BaseException:
                    layout.remove_dir(stage)
                    raise
                finally:
                    lock.close()
            layout.write_pointer(root, name)
            layout.collect_garbage(root)
        return root
    raise ArtifactError(f"{url}: replaced {tries} times while downloading it; try again")


def adopt(url: str, vdir: pathlib.Path, cache=None) -> None:
    """Move a version just uploaded (a whole local version folder) into url's cache, so loading it downloads
    nothing; silently nothing where that cannot be done (another file system)."""
    root = cache_root(url, cache)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with layout.write_lock(root):
            target = root / vdir.name
            if not target.exists():
                os.rename(vdir, target)
            layout.write_pointer(root, vdir.name)
            layout.collect_garbage(root)
    except (OSError, ArtifactError):
        pass


def read_manifest(url: str) -> tuple:
    """(version name, manifest dict) of the version url serves, read from the store without caching."""
    from .digest import MANIFEST
    url = normalize(url)
    fs, base = filesystem_for(url)
    name = read_pointer(url, fs, base)
    if name is None:
        raise _no_artifact(url, fs, base)
    try:
        with fs.open_input_stream(f"{base}/{name}/{MANIFEST}") as f:
            text = f.read()
    except Exception as exc:
        raise _store_error(url, f"read {name}/{MANIFEST}", exc) from None
    try:
        manifest = json.loads(text.decode("utf-8"))
    except ValueError:
        raise ArtifactError(f"{url}/{name}/{MANIFEST}: invalid manifest") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{url}/{name}/{MANIFEST}: invalid manifest (not a JSON object)")
    return name, manifest


# --- writing ----------------------------------------------------------------------------------------------------

def upload_dir() -> pathlib.Path:
    """A fresh local folder a version bound for the store is built in (inside the default cache, so the version
    can be moved into the cache once uploaded; the system's temporary folder where that cannot be created)."""
    base = default_cache() / ".uploads"
    try:
        base.mkdir(parents=True, exist_ok=True)
        return pathlib.Path(tempfile.mkdtemp(prefix="up-", dir=base))
    except OSError:
        return pathlib.Path(tempfile.mkdtemp(prefix="gtmkit-upload-"))


def _put(url, fs, key: str, local: pathlib.Path) -> None:
    try:
        with open(local, "rb") as f, fs.open_output_stream(key) as out:
            while block := f.read(CHUNK):
                out.write(block)
    except Exception as exc:
        raise _store_error(url, f"write {key.rsplit('/', 2)[-2]}/{local.name}", exc) from None


def _delete_version(fs, base: str, name: str) -> None:
    try:
        fs.delete_dir(f"{base}/{name}")
    except Exception:
        pass


def _versions(fs, base: str) -> list:
    import pyarrow.fs as pafs
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except Exception:
        return []
    return sorted(i.base_name for i in infos
                  if i.type == pafs.FileType.Directory and layout.VERSION.fullmatch(i.base_name))


def publish(url: str, vdir: pathlib.Path, overwrite: bool, switches=()) -> str | None:
    """Upload the local version folder vdir to url: members, then manifest.json, then the pointer object. The
    pointer is read again right before it is written: an artifact that appeared meanwhile is refused without
    overwrite, and inside a Switch block one serving another version than the block's base raises VersionChanged.
    Either way, and on any failure, the uploaded objects are deleted and nothing points to them. Returns the
    version replaced (None: none). Versions older than the replaced one are deleted from the store."""
    from .digest import MANIFEST
    url = normalize(url)
    fs, base = filesystem_for(url)
    name = vdir.name
    manifest = json.loads((vdir / MANIFEST).read_text(encoding="utf-8"))
    try:
        for e in sorted(manifest["files"].values(), key=lambda e: e["file"]):
            _put(url, fs, f"{base}/{name}/{e['file']}", vdir / e["file"])
        _put(url, fs, f"{base}/{name}/{MANIFEST}", vdir / MANIFEST)
        now = read_pointer(url, fs, base)
        if now is not None and not overwrite:
            raise ArtifactError(f"{url}: already exists (pass overwrite=True / --force to replace it)")
        for sw in switches:
            sw.check(now)
        try:
            with fs.open_output_stream(f"{base}/{layout.POINTER}") as out:
                out.write((name + "\n").encode("ascii"))
        except Exception as exc:
            raise _store_error(url, f"write {layout.POINTER}", exc) from None
    except BaseException:
        _delete_version(fs, base, name)
        raise
    for sw in switches:
        sw.replaced, sw.published = now, name
    for old in _versions(fs, base) if now is not None else ():
        if old < now:  # older than the one replaced: no reader copies it any more, no writer still uploads it
            _delete_version(fs, base, old)
    return now


def remove_local(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)

