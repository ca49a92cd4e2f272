"""Extractive question answering (SQuAD 1.1 / 2.0, the KJV QA task): an answer is a span of the
context, found by a start and an end head.

    [CLS] question [SEP] context window [SEP] -> encoder [B, T, D] -> dense -> [B, T, 2]
                                                  (start logit, end logit per token)

as Hugging Face's BertForQuestionAnswering, transformers' run_qa and google-research/bert's
run_squad:
- A context longer than the row is cut into windows of the tokens left after the question
  (at most qa.max_query_length tokens), each window starting qa.doc_stride tokens after the
  previous one. Each window is a row; a row's start/end target is the answer's first/last token
  when the whole answer lies in that window, else [CLS] (position 0), which also stands for
  "no answer" (SQuAD 2.0).
- Decoding a question: over all its windows, the qa.n_best_size best start and end tokens of
  the context, pairs with start <= end and at most qa.max_answer_length tokens, scored by
  start + end logit; the best pair's text is cut from the ORIGINAL context by the tokens'
  character offsets (so spacing and case come back as written). Its no-answer score is the
  smallest [CLS] start + end over the windows, minus the best span's score.
- SQuAD 2.0 (a task with unanswerable questions): "no answer" is predicted where the no-answer
  score exceeds a threshold, chosen on the dev set to maximise F1 as the official script's
  best_f1 does; the results give it (`no_answer_threshold`).
Scored with the official EM/F1 (squad_metrics.py), as percentages.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlmjax.finetuning import classification
from mlmjax.finetuning import kind as kind_lib
from mlmjax.finetuning import squad_metrics
from mlmjax.models import layers
from mlmjax.models import special_ids
from mlmjax.training.core import losses


class SpanExtractor(nnx.Module):

  def __init__(self, encoder: nnx.Module, model_config, rngs: nnx.Rngs):
    self.encoder = encoder
    self.qa_outputs = layers.Dense(rngs, (model_config.hidden_size, 2), ("embed", None),
                                   model_config.initializer_range)

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> jax.Array:
    """[B, T, 2] float32 start and end logits (no dropout before the head, as in BERT)."""
    hidden_btd = classification.encoder_states(self.encoder, batch, dropout_key, constrain_layer)
    return self.qa_outputs(hidden_btd).astype(jnp.float32)


def _answer_tokens(starts: np.ndarray, ends: np.ndarray, answer: tuple[str, int]
                   ) -> tuple[int, int]:
  """The first and last context piece overlapping the answer's characters."""
  text, first_char = answer
  end_char = first_char + len(text)
  overlap = np.nonzero((ends > first_char) & (starts < end_char))[0]
  return (int(overlap[0]), int(overlap[-1])) if len(overlap) else (-1, -1)


class QuestionAnswering(kind_lib.Kind):

  name = "question_answering"
  headline = "f1"
  train_accuracy = False

  def __init__(self, qa_settings, unanswerable: bool):
    """`unanswerable`: the task has questions without an answer (SQuAD 2.0)."""
    self.settings, self.unanswerable = qa_settings, unanswerable

  def windows(self, n: int, budget: int) -> list[tuple[int, int]]:
    """[start, end) of each window of `budget` tokens over a context of `n`: qa.doc_stride
    apart, but at most half a window, so that windows overlap and an answer across one
    window's end lies whole in the next (BERT's doc_stride 128 assumes 384-token rows)."""
    stride = max(1, min(self.settings.doc_stride, budget // 2))
    out, start = [], 0
    while True:
      out.append((start, min(start + budget, n)))
      if start + budget >= n:
        return out
      start += stride

  def encode(self, examples, tok, seq_len, what):
    questions = [q[:self.settings.max_query_length] for q in tok.encode(examples.questions)]
    contexts = tok.encode_offsets(examples.contexts)
    rows = {k: [] for k in ("input_ids", "token_type_ids", "start_positions", "end_positions")}
    offsets, example_index = [], []
    for i, (q, (ids, starts, ends)) in enumerate(zip(questions, contexts)):
      starts = kind_lib.text_starts(examples.contexts[i], starts, ends)
      first_context = len(q) + 2  # after [CLS] question [SEP]
      answer = (_answer_tokens(starts, ends, examples.answers[i][0]) if examples.answers[i]
                else (-1, -1))
      for w0, w1 in self.windows(len(ids), seq_len - first_context - 1):
        row = [special_ids.CLS_ID, *q, special_ids.SEP_ID, *ids[w0:w1], special_ids.SEP_ID]
        inside = answer[0] >= w0 and 0 <= answer[1] < w1
        rows["input_ids"].append(row)
        rows["token_type_ids"].append([0] * first_context + [1] * (w1 - w0 + 1))
        rows["start_positions"].append(answer[0] - w0 + first_context if inside else 0)
        rows["end_positions"].append(answer[1] - w0 + first_context if inside else 0)
        span = np.full((seq_len, 2), -1, np.int32)  # characters of the context a token holds
        span[first_context:first_context + w1 - w0] = np.stack([starts[w0:w1], ends[w0:w1]], 1)
        offsets.append(span)
        example_index.append(i)
    n = len(example_index)
    out = {**kind_lib.padded_rows(rows["input_ids"], rows["token_type_ids"], seq_len),
           "start_positions": np.asarray(rows["start_positions"], np.int32),
           "end_positions": np.asarray(rows["end_positions"], np.int32),
           "weights": np.ones(n, np.float32)}
    return kind_lib.Encoded(out, {"offsets": np.stack(offsets),
                                  "example_index": np.asarray(example_index, np.int64)})

  def model(self, encoder, model_settings, finetune_model, rngs):
    return SpanExtractor(encoder, model_settings, rngs)

  def objective(self):
    def sums(logits_bt2, batch):
      losses_b = 0.5 * (losses.cross_entropy(logits_bt2[..., 0], batch["start_positions"]) +
                        losses.cross_entropy(logits_bt2[..., 1], batch["end_positions"]))
      return kind_lib.weighted_sums(losses_b, jnp.zeros_like(losses_b), batch["weights"])
    return kind_lib.mean_objective(sums)

  def decode(self, logits_nt2: np.ndarray, dev: kind_lib.Encoded, examples
             ) -> tuple[dict[str, str], dict[str, float]]:
    """Per question id: the best span's text, and its no-answer score (see the docstring)."""
    s = self.settings
    offsets, example_index = dev.host["offsets"], dev.host["example_index"]
    texts, no_answer = {}, {}
    bounds = np.searchsorted(example_index, np.arange(len(examples) + 1))
    for i in range(len(examples)):
      best, best_text, null = -np.inf, "", np.inf
      for r in range(bounds[i], bounds[i + 1]):
        start_t, end_t = logits_nt2[r, :, 0], logits_nt2[r, :, 1]
        null = min(null, start_t[0] + end_t[0])
        context = np.nonzero(offsets[r, :, 0] >= 0)[0]
        top_starts = context[np.argsort(-start_t[context], kind="stable")[:s.n_best_size]]
        top_ends = context[np.argsort(-end_t[context], kind="stable")[:s.n_best_size]]
        span_ab = start_t[top_starts][:, None] + end_t[top_ends][None, :]
        valid_ab = ((top_ends[None, :] >= top_starts[:, None]) &
                    (top_ends[None, :] < top_starts[:, None] + s.max_answer_length))
        span_ab = np.where(valid_ab, span_ab, -np.inf)
        a, b = np.unravel_index(np.argmax(span_ab), span_ab.shape) if span_ab.size else (0, 0)
        if span_ab.size and span_ab[a, b] > best:
          best = span_ab[a, b]
          best_text = examples.contexts[i][offsets[r, top_starts[a], 0]:offsets[r, top_ends[b], 1]]
      texts[examples.ids[i]] = best_text
      no_answer[examples.ids[i]] = float(null - best)
    return texts, no_answer

  def predict(self, texts: dict[str, str], no_answer: dict[str, float], threshold: float
              ) -> dict[str, str]:
    """The answers: "" (no answer) where the no-answer score exceeds `threshold`."""
    return {q: "" if self.unanswerable and no_answer[q] > threshold else t
            for q, t in texts.items()}

  def score(self, logits_nt2, dev, examples):
    rows = dev.rows
    picked = [np.take_along_axis(kind_lib.log_softmax(logits_nt2[..., j]),
                                 rows[key][:, None], 1)[:, 0]
              for j, key in enumerate(("start_positions", "end_positions"))]
    loss = float(-np.mean(0.5 * (picked[0] + picked[1])))
    texts, no_answer = self.decode(logits_nt2, dev, examples)
    gold = {q: [t for t, _ in answers] for q, answers in zip(examples.ids, examples.answers)}
    threshold, out = 0.0, {}
    if self.unanswerable:  # chosen on these dev questions, as the official best_f1
      threshold = squad_metrics.best_threshold(texts, no_answer, gold)[2]
      out["no_answer_threshold"] = float(threshold)
    metrics = squad_metrics.score(self.predict(texts, no_answer, threshold), gold)
    return {"loss": loss, **{k: float(v) for k, v in metrics.items()}, **out}

  def baseline(self, train, dev):
    """Answering "no answer" everywhere: right on the unanswerable share only."""
    if not self.unanswerable:
      return {}
    return {"no_answer_f1": 100.0 * float(np.mean([not a for a in dev.answers]))}

