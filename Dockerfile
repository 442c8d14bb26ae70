# syntax=docker/dockerfile:1
# kernelloop: one image for the API, the migrations and the GPU workers (docs/deploy.md).
#
# The CUDA *devel* image: workers compile candidates with nvcc and the host compiler
# (torch.utils.cpp_extension.load_inline), so the toolkit and Python headers must be present.
# Match CUDA_IMAGE and TORCH_INDEX_URL to the hosts' driver (the driver must be at least as new
# as the toolkit); the H200 measurements of benchmarks/README.md used torch 2.11 + CUDA 13.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG TORCH_SPEC="torch>=2.9"

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    KERNELLOOP_DATA_DIR=/var/lib/kernelloop \
    KERNELLOOP_CACHE_DIR=/var/cache/kernelloop

# python3-dev: Python.h for extension builds; g++: the host compiler; util-linux: unshare and
# setpriv, which the sandbox's fallbacks use (docs/integrity.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv "$VIRTUAL_ENV" \
 && pip install --upgrade pip \
 && pip install --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"

WORKDIR /app
# Dependencies first (a layer that survives code edits), then the code, installed editable so that
# migrations/ and examples/ (the scripted provider's candidates) stay beside the packages.
COPY pyproject.toml README.md ./
RUN mkdir -p problems harness agent store worker api cli config display vocabulary migrations \
 && pip install ".[service]" && pip uninstall -y kernelloop
COPY alembic.ini ./
COPY problems ./problems
COPY harness ./harness
COPY agent ./agent
COPY store ./store
COPY worker ./worker
COPY api ./api
COPY cli ./cli
COPY config ./config
COPY display ./display
COPY vocabulary ./vocabulary
COPY migrations ./migrations
COPY examples ./examples
RUN pip install --no-deps -e . \
 && mkdir -p "$KERNELLOOP_DATA_DIR" "$KERNELLOOP_CACHE_DIR"

EXPOSE 8000
# The API by default; docker-compose.yml runs the migrations and the workers from the same image.
CMD ["python", "-m", "cli.service", "serve", "--host", "0.0.0.0", "--port", "8000"]
