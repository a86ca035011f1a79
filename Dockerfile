# The project's image for SageMaker (rlvr-submit --build) and for `rlvr-submit --local`:
# CUDA vLLM (the official vllm-openai image: CUDA, torch and vLLM built together) + rlvr.
#
#   docker build -t rlvr:latest .                 # or: rlvr-submit CONFIG --build [--push]
#   docker run --gpus all rlvr:latest train       # what SageMaker does (SageMaker's /opt/ml mounted)
#
# The entry point maps SageMaker's environment to rlvr-train (rlvr/cloud/entrypoint.py).
ARG VLLM_VERSION=0.32.0
FROM vllm/vllm-openai:v${VLLM_VERSION}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    TOKENIZERS_PARALLELISM=false \
    HF_HUB_DISABLE_TELEMETRY=1

# bubblewrap and a dedicated user: the code verifier's sandbox (docs/verify.md)
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap git \
 && rm -rf /var/lib/apt/lists/* \
 && (id rlvr-sandbox >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin rlvr-sandbox)

WORKDIR /opt/rlvr
# dependencies first (a code change does not reinstall them); vLLM's torch stays as it is
COPY pyproject.toml README.md ./
# (with the trackers extra: log.trackers works in a job; WANDB_*/MLFLOW_* come with rlvr-submit --env)
RUN python3 -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); \
print('\n'.join(x for x in d['project']['dependencies'] + d['project']['optional-dependencies']['trackers'] \
if not x.startswith('torch')))" > /tmp/req.txt \
 && python3 -m pip install -r /tmp/req.txt
COPY rlvr ./rlvr
COPY configs ./configs
COPY bin ./bin
RUN python3 -m pip install --no-deps . && python3 -c "import rlvr.cloud.entrypoint, vllm, ray"

# OLMES in its own virtualenv for `rlvr-eval --harness olmes` (an OLMES --eval-config): its torch
# and vLLM pins clash with training's. Pinned by commit in docker/olmes-requirements.txt;
# --build-arg WITH_OLMES=0 leaves it out.
ARG WITH_OLMES=1
COPY docker/olmes-requirements.txt /opt/olmes-requirements.txt
RUN if [ "$WITH_OLMES" = "1" ]; then \
      python3 -m venv /opt/olmes-venv \
      && /opt/olmes-venv/bin/python -m pip install -r /opt/olmes-requirements.txt \
      && /opt/olmes-venv/bin/python -c "import oe_eval.launch"; \
    fi

ENTRYPOINT ["python3", "-m", "rlvr.cloud.entrypoint"]
CMD ["train"]
