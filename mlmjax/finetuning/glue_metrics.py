"""GLUE's metrics on a dev set's predictions, in numpy (scipy for the rank correlation).

  accuracy        fraction of exact class predictions (every classification task)
  f1              F1 of the positive class 1 (MRPC, QQP)
  matthews_corr   Matthews correlation coefficient, in [-1, 1]; 0 for a constant predictor (CoLA)
  pearson         Pearson correlation of predicted and true scores (STS-B)
  spearman        Spearman rank correlation of the same (STS-B)

Degenerate inputs (a constant prediction, no positives) give 0 rather than NaN, as
scikit-learn's `matthews_corrcoef` and `f1_score(zero_division=0)` do, so a metrics file stays
valid JSON.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

CLASSIFICATION = ("accuracy", "f1", "matthews_corr")
REGRESSION = ("pearson", "spearman")


def accuracy(predicted: np.ndarray, labels: np.ndarray) -> float:
  return float(np.mean(predicted == labels))


def f1(predicted: np.ndarray, labels: np.ndarray) -> float:
  true_pos = float(np.sum((predicted == 1) & (labels == 1)))
  denominator = float(np.sum(predicted == 1) + np.sum(labels == 1))
  return 2.0 * true_pos / denominator if denominator else 0.0


def matthews_corr(predicted: np.ndarray, labels: np.ndarray) -> float:
  """The multi-class form (Gorodkin 2004), which is the usual MCC for two classes."""
  k = int(max(predicted.max(), labels.max())) + 1
  confusion = np.zeros((k, k), np.float64)
  np.add.at(confusion, (labels, predicted), 1.0)
  t, p = confusion.sum(1), confusion.sum(0)  # true and predicted counts per class
  n, correct = confusion.sum(), np.trace(confusion)
  denominator = np.sqrt((n * n - p @ p) * (n * n - t @ t))
  return float((correct * n - t @ p) / denominator) if denominator else 0.0


def _correlation(fn, predicted: np.ndarray, labels: np.ndarray) -> float:
  if np.ptp(predicted) == 0 or np.ptp(labels) == 0:
    return 0.0  # undefined for a constant: a model that predicts one score learned nothing
  return float(fn(predicted, labels).statistic)


def pearson(predicted: np.ndarray, labels: np.ndarray) -> float:
  return _correlation(stats.pearsonr, predicted, labels)


def spearman(predicted: np.ndarray, labels: np.ndarray) -> float:
  return _correlation(stats.spearmanr, predicted, labels)


_FUNCTIONS = {"accuracy": accuracy, "f1": f1, "matthews_corr": matthews_corr,
              "pearson": pearson, "spearman": spearman}


def compute(names: tuple[str, ...], outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
  """`names` of the metrics of model `outputs` ([N, K] class logits, or [N, 1] scores for
  regression) against `labels`."""
  predicted = outputs[:, 0] if outputs.shape[1] == 1 else np.argmax(outputs, axis=1)
  return {name: _FUNCTIONS[name](predicted, labels) for name in names}
