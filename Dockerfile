# edge-inference service image: CPU engines only (ONNX Runtime); EXTRAS=tflite,openvino,events adds more.
#   docker build -t edge-inference .                      (or: --build-arg EXTRAS=tflite,openvino,events)
#   docker run -p 127.0.0.1:8080:8080 -v $PWD/streams.yaml:/etc/edge/streams.yaml:ro edge-inference
FROM python:3.11-slim AS build
ARG EXTRAS=""
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY cli ./cli
COPY edge ./edge
COPY backends ./backends
COPY models ./models
COPY service ./service
# the one import name: links to the five folders above (see edge_inference/__init__.py)
COPY edge_inference ./edge_inference
# The project and the extras asked for, installed into a venv of their own that the final stage copies whole: what
# this stage resolved is exactly what runs, and no installer, wheel or build file reaches the final image. (Not a
# `RUN --mount=type=bind,from=build` install: podman 4.3, Debian bookworm's, cannot mount a cached stage, podman
# issue 16281, and buildah does not rebuild such a layer when the stage changes, buildah issue 6609.)
# Left out, as nothing here uses them: pip in the venv, bytecode (below), test suites that ship inside wheels
# (NumPy's), and ONNX Runtime's C library (34 MB), which its wheel carries since 1.19 for other packages to link
# against (onnxruntime PR #21223): the Python module has the runtime built in and never loads it.
# hadolint ignore=DL3013
RUN python -m venv --without-pip /opt/edge \
    && PYTHONDONTWRITEBYTECODE=1 pip --python /opt/edge/bin/python install --no-cache-dir --no-compile \
        ".${EXTRAS:+[$EXTRAS]}" \
    && find /opt/edge/lib/python3.11/site-packages -depth -type d -name tests -path '*/numpy/*' -exec rm -rf {} + \
    && rm -f /opt/edge/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.*

FROM python:3.11-slim
# No bytecode in the image (as the official python images ship none): the service writes its own at the first
# start into the container's layer, under PYTHONPYCACHEPREFIX: 15 MB and 1.6 s of CPU once per container, where
# bytecode in the image would be 23 MB in every copy of it.
ENV PATH=/opt/edge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONPYCACHEPREFIX=/var/lib/edge/.cache/python \
    EDGE_MODEL_CACHE=/var/lib/edge/models \
    EDGE_DATA_DIR=/var/lib/edge/data \
    EDGE_IN_CONTAINER=1
COPY --from=build /opt/edge /opt/edge
RUN useradd --system --uid 10001 --home-dir /var/lib/edge --create-home --groups video edge \
    && mkdir -p /var/lib/edge/models /var/lib/edge/data /var/lib/edge/.cache/python && chown -R edge /var/lib/edge
USER 10001
WORKDIR /var/lib/edge
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health/live', timeout=4).status != 200)"]
# Inside a container, binding all interfaces is what makes the published port reachable. Without a mounted
# config, `edge serve` exits with one line naming the file to mount.
ENTRYPOINT ["edge", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD ["--config", "/etc/edge/streams.yaml"]
