# edge-inference service image: CPU engines only (ONNX Runtime); EXTRAS=tflite,openvino,events adds more.
#   docker build -t edge-inference .                      (or: --build-arg EXTRAS=tflite,openvino,events)
#   docker run -p 127.0.0.1:8080:8080 -v $PWD/streams.yaml:/etc/edge/streams.yaml:ro edge-inference
ARG EXTRAS=""

FROM python:3.11-slim AS build
ARG EXTRAS
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY cli ./cli
COPY edge ./edge
COPY backends ./backends
COPY models ./models
COPY service ./service
# the one import name: links to the five folders above (see edge_inference/__init__.py)
COPY edge_inference ./edge_inference
# The project and every dependency of the extras asked for, as wheels: the final stage installs from these alone,
# offline, so what this stage resolved is exactly what runs.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim
ARG EXTRAS
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    EDGE_MODEL_CACHE=/var/lib/edge/models \
    EDGE_DATA_DIR=/var/lib/edge/data \
    EDGE_IN_CONTAINER=1
# What `edge serve` imports, with the engines and extras that are installed
ARG WARM_IMPORTS="import importlib, importlib.util as u; [importlib.import_module(m) for m in ( \
'edge_inference.cli.serve', 'edge_inference.cli.detect', 'edge_inference.cli.backends_cmd', \
'edge_inference.service.app', 'edge_inference.service.server', 'edge_inference.edge.runtime.streams', \
'edge_inference.backends.onnxruntime_backend', 'onnxruntime', 'uvicorn.loops.auto', 'uvicorn.lifespan.on', \
'uvicorn.protocols.http.auto', 'uvicorn.protocols.websockets.auto', 'openvino', 'ai_edge_litert.interpreter', \
'paho.mqtt.client') if u.find_spec(m.split('.')[0])]"
# The wheels are read through a bind mount of the build stage: no copy of them stays behind in a layer.
# Bytecode is written only for the modules the service imports (a third of what pip would compile), and test
# suites that ship inside wheels (NumPy's) are left out: together about 60 MB that nothing here runs.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-compile --no-index --find-links /wheels "edge-inference${EXTRAS:+[$EXTRAS]}" \
    && find /usr/local/lib/python3.11/site-packages -depth -type d -name tests -path '*/numpy/*' -exec rm -rf {} + \
    && PYTHONDONTWRITEBYTECODE='' python -c "$WARM_IMPORTS" \
    && useradd --system --uid 10001 --home-dir /var/lib/edge --create-home --groups video edge \
    && mkdir -p /var/lib/edge/models /var/lib/edge/data && chown -R edge /var/lib/edge
USER 10001
WORKDIR /var/lib/edge
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health/live', timeout=4).status != 200)"]
# Inside a container, binding all interfaces is what makes the published port reachable. Without a mounted
# config, `edge serve` exits with one line naming the file to mount.
ENTRYPOINT ["edge", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD ["--config", "/etc/edge/streams.yaml"]
