"""One path layer: every file a run reads or writes, local or in a bucket (`gs://`, `s3://`).

Local paths go to the operating system exactly as before (atomic renames, O_EXCL); bucket paths
go through etils `epath` (fsspec: gcsfs, s3fs), the layer orbax itself writes checkpoints with.
Callers use these functions with plain strings and never ask which kind a path is, except where
object storage differs in kind:

  - an object appears whole when its upload ends, so `write_atomic` needs no temporary name;
  - a bucket has no folders: `makedirs` does nothing there and `isdir` means "has objects below";
  - renaming a folder is not atomic there: writers of folders (prepare, export) build them
    locally or write a marker last (prepare's manifest.json);
  - conditional writes (`create_if_absent`, `replace_if`, `delete_if`: GCS `ifGenerationMatch`,
    S3 `If-None-Match`/`If-Match`) are what the workdir lock is made of.

Test servers and emulators: with STORAGE_EMULATOR_HOST set (what google-cloud-storage and gcsfs
read), `use_storage_emulator()` points array_record's and tensorstore's (orbax) GCS readers at
it too; it runs where this module or a caller hands a bucket path to one of those libraries.
For S3 the standard AWS_ENDPOINT_URL serves s3fs (aiobotocore) and tensorstore alike.

Why at the top of the package, beside errors.py: every layer reads or writes files (data's
sources and prepared data, training's run folder and lock, hf's exports), and it imports
nothing of mlmjax, so any of them may import it.
"""

from __future__ import annotations

import builtins
import glob as glob_lib
import io
import os
import shutil

REMOTE_SCHEMES = ("gs://", "s3://")


def use_storage_emulator() -> None:
  """With STORAGE_EMULATOR_HOST set (a test server, an emulator), the GCS clients that do not
  read it are pointed at it as well; a variable the user set is left as it is. Nothing without
  it."""
  emulator = os.environ.get("STORAGE_EMULATOR_HOST")
  if emulator:
    url = emulator if "://" in emulator else f"http://{emulator}"
    os.environ.setdefault("CLOUD_STORAGE_EMULATOR_ENDPOINT", url)  # array_record
    os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", url)  # orbax's arrays
    # gcsfs asks the (gRPC) storage-control API for the bucket type first, which an emulator
    # lacks: minutes of retries. Only an emulator's gcsfs is told to skip it.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def is_remote(path: str) -> bool:
  return str(path).startswith(REMOTE_SCHEMES)


def _epath(path: str):
  use_storage_emulator()
  from etils import epath  # pylint: disable=g-import-not-at-top  (slow; only for buckets)
  return epath.Path(path)


def join(base: str, *names: str) -> str:
  if is_remote(base):
    return "/".join([base.rstrip("/"), *names])
  return os.path.join(base, *names)


def abspath(path: str) -> str:
  return path if is_remote(path) else os.path.abspath(os.path.expanduser(path))


def expand(path: str) -> str:
  """`~` expanded for local paths; bucket paths as given."""
  return path if is_remote(path) else os.path.expanduser(path)


def basename(path: str) -> str:
  return path.rstrip("/").rsplit("/", 1)[-1] if is_remote(path) else os.path.basename(path)


def exists(path: str) -> bool:
  return _epath(path).exists() if is_remote(path) else os.path.exists(path)


def isfile(path: str) -> bool:
  return _epath(path).is_file() if is_remote(path) else os.path.isfile(path)


def isdir(path: str) -> bool:
  return _epath(path).is_dir() if is_remote(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
  """The names in a folder, sorted."""
  if is_remote(path):
    return sorted(p.name for p in _epath(path).iterdir())
  return sorted(os.listdir(path))


def makedirs(path: str) -> None:
  if is_remote(path):
    return  # a bucket has no folders: objects are created with their full names
  os.makedirs(path, exist_ok=True)


def open(path: str, mode: str = "r",  # pylint: disable=redefined-builtin
         encoding: str | None = None):
  """A file object; bucket files read with seek support (ranged reads) and write on close."""
  if "b" not in mode and encoding is None:
    encoding = "utf-8"
  if is_remote(path):
    if "a" in mode:
      raise ValueError(f"{path}: objects cannot be appended to; rewrite them")
    if "b" not in mode:
      return _epath(path).open(mode, encoding=encoding)
    f = _epath(path).open(mode)
    # A standard buffered reader over it: readline(size), peek, as local files have.
    return io.BufferedReader(f, buffer_size=1 << 20) if mode == "rb" else f
  return builtins.open(path, mode, encoding=encoding)


def read_bytes(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def read_range(path: str, start: int, end: int) -> bytes:
  """Bytes [start, end) of a file: in a bucket one ranged request of exactly those bytes (a
  file object would fetch a whole read-ahead block per document)."""
  if is_remote(path):
    return _filesystem(path).cat_file(path, start=start, end=end)
  with builtins.open(path, "rb") as f:
    f.seek(start)
    return f.read(end - start)


def read_text(path: str) -> str:
  return read_bytes(path).decode("utf-8")


def write_atomic(path: str, data: bytes | str) -> None:
  """Readers see the old content or the new, never half of it."""
  if isinstance(data, str):
    data = data.encode("utf-8")
  if is_remote(path):
    _epath(path).write_bytes(data)  # an object appears whole when its upload ends
    return
  tmp = f"{path}.tmp{os.getpid()}"  # per process: several hosts may write the same file
  with builtins.open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


def remove(path: str) -> None:
  if is_remote(path):
    _epath(path).unlink()
  else:
    os.remove(path)


def rmtree(path: str) -> None:
  if is_remote(path):
    try:  # another process may be removing the same folder (preparation's last hosts)
      _epath(path).rmtree()
    except FileNotFoundError:
      pass
  else:
    shutil.rmtree(path, ignore_errors=True)


def glob(pattern: str) -> list[str]:
  """Files matching `pattern` (`**` recurses), sorted."""
  if not is_remote(pattern):
    return [p for p in sorted(glob_lib.glob(pattern, recursive=True)) if os.path.isfile(p)]
  scheme = pattern[:pattern.index("://") + 3]
  fs = _filesystem(pattern)
  return sorted(scheme + p for p in fs.glob(pattern[len(scheme):])
                if fs.isfile(p))


def has_magic(pattern: str) -> bool:
  return glob_lib.has_magic(pattern)


def _filesystem(path: str):
  use_storage_emulator()
  import fsspec  # pylint: disable=g-import-not-at-top
  return fsspec.filesystem(path.split("://", 1)[0])


def upload(local: str, remote: str) -> None:
  """Copies a local file, or a folder's tree, to `remote` (local too: a plain copy)."""
  if not is_remote(remote):
    if os.path.isdir(local):
      shutil.copytree(local, remote, dirs_exist_ok=True)
    else:
      shutil.copyfile(local, remote)
    return
  if os.path.isdir(local):
    for root, _, files in os.walk(local):
      for name in sorted(files):
        rel = os.path.relpath(os.path.join(root, name), local).replace(os.sep, "/")
        upload(os.path.join(root, name), join(remote, rel))
    return
  with builtins.open(local, "rb") as src, open(remote, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 22)


def download(remote: str, local: str) -> None:
  """Copies a file, or every object below a bucket folder, to a local path."""
  if not is_remote(remote):
    if os.path.isdir(remote):
      shutil.copytree(remote, local, dirs_exist_ok=True)
    else:
      shutil.copyfile(remote, local)
    return
  if isfile(remote):
    with open(remote, "rb") as src, builtins.open(local, "wb") as dst:
      shutil.copyfileobj(src, dst, 1 << 22)
    return
  os.makedirs(local, exist_ok=True)
  for name in listdir(remote):
    child = join(remote, name)
    download(child, os.path.join(local, name))


# ---- conditional writes (object storage only) -----------------------------------------------
# A version is what the store compares: GCS's generation, S3's ETag. Each returns None where
# the precondition failed (someone else wrote first).
class PreconditionFailed(Exception):
  pass


def _split(path: str) -> tuple[str, str]:
  bucket, _, key = path.split("://", 1)[1].partition("/")
  return bucket, key


def _gcs_blob(path: str):
  use_storage_emulator()
  from google.cloud import storage  # pylint: disable=g-import-not-at-top
  bucket, key = _split(path)
  if os.environ.get("STORAGE_EMULATOR_HOST"):
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=g-import-not-at-top
    client = storage.Client(project="emulator", credentials=AnonymousCredentials())
  else:
    client = storage.Client()
  return client.bucket(bucket).blob(key)


def _s3(method: str, **kwargs) -> dict:
  """One S3 request through the aiobotocore client s3fs already holds (no boto3: its botocore
  pins fight aiobotocore's); a response's Body comes back read. A refusal raises the
  ClientError itself, not s3fs's translation of it, so that callers can read its code.

  s3fs passes on only the arguments its botocore knows: IfMatch needs botocore >= 1.35.74,
  which setup.py's aiobotocore floor guarantees (older, the write would be unconditional)."""
  fs = _filesystem("s3://")
  from fsspec import asyn  # pylint: disable=g-import-not-at-top

  async def call():
    out = await fs._call_s3(method, **kwargs)  # pylint: disable=protected-access
    body = out.get("Body")
    if body is not None:
      try:
        out["Body"] = await body.read()
      finally:
        body.close()
    return out

  try:
    return asyn.sync(fs.loop, call)
  except OSError as e:
    if hasattr(e.__cause__, "response"):  # s3fs's translation of a botocore ClientError
      raise e.__cause__ from None
    raise


def read_versioned(path: str) -> tuple[bytes, str] | None:
  """(content, version), or None if there is no such object."""
  if path.startswith("gs://"):
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
    blob = _gcs_blob(path)
    try:
      data = blob.download_as_bytes()
    except exceptions.NotFound:
      return None
    return data, str(blob.generation)
  import botocore.exceptions  # pylint: disable=g-import-not-at-top
  bucket, key = _split(path)
  try:
    out = _s3("get_object", Bucket=bucket, Key=key)
  except botocore.exceptions.ClientError as e:
    if e.response["Error"]["Code"] == "NoSuchKey":
      return None
    raise
  return out["Body"], out["ETag"]


def write_if(path: str, data: bytes, version: str | None) -> str | None:
  """Writes `data` if the object is at `version` (None: if there is no object); returns the
  new version, or None if the precondition failed."""
  if path.startswith("gs://"):
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
    blob = _gcs_blob(path)
    try:
      blob.upload_from_string(data, if_generation_match=int(version) if version else 0)
    except exceptions.PreconditionFailed:
      return None
    return str(blob.generation)
  import botocore.exceptions  # pylint: disable=g-import-not-at-top
  bucket, key = _split(path)
  condition = {"IfMatch": version} if version else {"IfNoneMatch": "*"}
  try:
    out = _s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
  except botocore.exceptions.ClientError as e:
    if e.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict",
                                       "NoSuchKey"):
      return None
    raise
  return out["ETag"]


def delete_if(path: str, version: str) -> bool:
  """Deletes the object if it is still at `version`."""
  if path.startswith("gs://"):
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
    blob = _gcs_blob(path)
    try:
      blob.reload()  # GCS checks the precondition itself; an emulator may not: check first
      if str(blob.generation) != version:
        return False
      blob.delete(if_generation_match=int(version))
    except (exceptions.PreconditionFailed, exceptions.NotFound):
      return False
    return True
  bucket, key = _split(path)
  current = read_versioned(path)  # S3's conditional delete is recent; compare, then delete
  if current is None or current[1] != version:
    return False
  _s3("delete_object", Bucket=bucket, Key=key)
  return True
