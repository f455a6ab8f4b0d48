# reaper's container image: docker build -t reaper:0.1.0 .
# Stage 1 builds reaper's wheel and the wheels of its dependencies; stage 2 installs them on a
# slim Python with no compiler and no network, and runs as an unprivileged user whose uid
# (65532) the Kubernetes manifests name in runAsUser.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY reaper ./reaper
COPY sql ./sql
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
# Bytecode is compiled at install time; the root filesystem may then be read-only.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 65532 reaper \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin reaper
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels reaper && rm -rf /wheels
USER 65532:65532
EXPOSE 9465
ENTRYPOINT ["reaper"]
CMD ["run"]
