"""Text to ids: tokenizers, sentences, word annotations, tokenized documents.

  tokenizer.py     sentencepiece (trained or loaded); hf_tokenizer.py: Hugging Face's
  settings.py      the tokenizer.* keys, typed and checked
  sentences.py     a rule-based English sentence splitter
  annotation.py    spaCy's word annotations aligned to token pieces
  documents.py     tokenized documents, from raw text or prepared data
  vocab_stats.py   per-id tables the masking strategies read
Imports nothing of data/ outside it.
"""
