"""The progress log's machine figures."""

import jax

from mlmjax.training import metrics


def test_peak_device_memory_is_logged_where_the_runtime_reports_it(caplog):
  # A CPU reports no memory statistics: no figure rather than a made-up one.
  cpus = [d.memory_stats() for d in jax.local_devices()]
  assert cpus == [None] * 8 and metrics.device_memory(cpus) == {}
  # What two GPUs' runtime reports (the keys of jax's memory_stats() there): the larger peak.
  gpus = [{"bytes_in_use": 2 * 2**30, "peak_bytes_in_use": p * 2**30, "bytes_limit": 4 * 2**30}
          for p in (2.5, 3)]
  row = {"loss": 2.0, "mlm_accuracy": 0.5, "learning_rate": 1e-4, **metrics.device_memory(gpus)}
  assert row["memory_peak_gib"] == 3.0
  with caplog.at_level("INFO"):
    metrics.log_progress(5, 10, row)
  assert caplog.records[-1].getMessage() == (
      "step 5/10 | loss 2.0000 | mlm_acc 0.5000 | lr 1.00e-04 | peak memory 3.00 GiB")
