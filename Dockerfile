# edge-inference service image: CPU engines only (ONNX Runtime; EXTRAS=tflite,openvino,events adds more).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY cli ./cli
COPY edge ./edge
COPY backends ./backends
COPY models ./models
COPY service ./service
# the one import name: links to the five folders above (see edge_inference/__init__.py)
COPY edge_inference ./edge_inference
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    EDGE_MODEL_CACHE=/var/lib/edge/models
COPY --from=build /wheels /wheels
# EXTRAS=tflite,openvino adds engines, EXTRAS=events tracking, events and MQTT; the base stays CPU-only and
# small. The project's own wheel is the version pin here.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --find-links /wheels "edge-inference${EXTRAS:+[$EXTRAS]}" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --home-dir /var/lib/edge --create-home --groups video edge \
    && mkdir -p /var/lib/edge/models && chown -R edge /var/lib/edge
USER 10001
WORKDIR /var/lib/edge
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health/live', timeout=4).status != 200)"]
# Inside a container, binding all interfaces is what makes the published port reachable.
ENTRYPOINT ["edge", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD ["--config", "/etc/edge/streams.yaml"]
