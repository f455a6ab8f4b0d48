# reaper's container image: docker build -t reaper:0.1.0 .
# Stage 1 builds reaper's wheel and the wheels of its dependencies and installs them into a
# virtual environment without pip; stage 2 copies that environment onto the same slim Python,
# with pip, setuptools and wheel removed, and runs as an unprivileged user whose uid (65532)
# the Kubernetes manifests name in runAsUser.
#
# One base for both stages, pinned by digest (a tag can be pushed again; a digest cannot). To
# move to a newer Python: `docker buildx imagetools inspect python:3.11-slim-bookworm` and put
# its version and digest here, or `docker build --build-arg PYTHON_IMAGE=...` to try one.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY reaper ./reaper
COPY sql ./sql
RUN pip wheel --no-cache-dir --disable-pip-version-check --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/reaper \
 && pip --python /opt/reaper/bin/python install --no-cache-dir --disable-pip-version-check \
      --no-index --find-links /wheels reaper

FROM ${PYTHON_IMAGE}
# Bytecode was compiled at install time; the root filesystem may then be read-only.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/reaper/bin:$PATH
# Nothing in the image installs or builds anything at run time: no pip, no setuptools.
RUN python -m pip uninstall --yes --quiet pip setuptools wheel \
 && rm -rf /usr/local/lib/python3.11/ensurepip \
 && groupadd --system --gid 65532 reaper \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin reaper
COPY --from=build /opt/reaper /opt/reaper
USER 65532:65532
EXPOSE 9465
ENTRYPOINT ["reaper"]
CMD ["run"]
