"""An MLServer custom runtime (MLServer 1.7's `MLModel`) running an ONNX detector on ONNX Runtime: the second Open
Inference Protocol server of the remote engine's tests (tests/mlserver.py starts it). Its tensors are declared in
model-settings.json, as MLServer's metadata endpoint answers them."""

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxDetector(MLModel):
    async def load(self) -> bool:
        self._session = ort.InferenceSession(str(self.settings.parameters.uri), providers=["CPUExecutionProvider"])
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {request.name: NumpyCodec.decode_input(request) for request in payload.inputs}
        found = self._session.run(None, feeds)
        names = [output.name for output in self._session.get_outputs()]
        asked = [output.name for output in payload.outputs or []] or names
        pairs = zip(names, found, strict=True)
        outputs = [NumpyCodec.encode_output(name, value) for name, value in pairs if name in asked]
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs)
