"""The progress log's machine figures."""

import jax

from mlmjax.training import metrics


def test_peak_device_memory_is_logged_where_the_runtime_reports_it(caplog):
  # A CPU reports no memory statistics: no figure rather than a made-up one.
  assert jax.local_devices()[0].memory_stats() is None
  assert metrics.device_memory(None) == {}
  # What a GPU's runtime reports (the keys of jax's memory_stats() there).
  gpu = {"bytes_in_use": 2 * 2**30, "peak_bytes_in_use": 3 * 2**30, "bytes_limit": 4 * 2**30}
  row = {"loss": 2.0, "mlm_accuracy": 0.5, "learning_rate": 1e-4, **metrics.device_memory(gpu)}
  assert row["memory_peak_gib"] == 3.0
  with caplog.at_level("INFO"):
    metrics.log_progress(5, 10, row)
  assert caplog.records[-1].getMessage() == (
      "step 5/10 | loss 2.0000 | mlm_acc 0.5000 | lr 1.00e-04 | peak memory 3.00 GiB")
