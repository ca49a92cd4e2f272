"""The special token ids every tokenizer maps onto and the model's embedding table relies on.

  [PAD]=0  [UNK]=1  [CLS]=2  [SEP]=3  [MASK]=4

The data (tokenizers, formats, masking), the model (ELECTRA never samples them) and the
Hugging Face bridge all read them here, so none of them needs another's module for a constant.
"""

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL = 5  # ids below this are never masked, predicted as random replacements, etc.
PIECES = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # their pieces, in id order
