"""KServe's own Python model server (pip `kserve`, 0.21) serving an ONNX detector on ONNX Runtime: the third Open
Inference Protocol server of the remote engine's tests (tests/kserve_python.py starts it).

    python onnx_detector.py NAME MODEL.onnx HTTP_PORT GRPC_PORT

KServe answers the v2 protocol over HTTP (JSON only) and gRPC (typed contents, not raw bytes), and offers none of
Triton's extensions."""

import sys

import onnxruntime as ort
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

TYPES = {"tensor(float)": "FP32", "tensor(uint8)": "UINT8", "tensor(int64)": "INT64"}


class OnnxDetector(Model):
    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.ready = True

    def _types(self, args: list) -> list[dict]:
        return [{"name": a.name, "datatype": TYPES[a.type], "shape": list(a.shape)} for a in args]

    def get_input_types(self) -> list[dict]:
        return self._types(self.session.get_inputs())

    def get_output_types(self) -> list[dict]:
        return self._types(self.session.get_outputs())

    async def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        feeds = {given.name: given.as_numpy() for given in payload.inputs}
        outputs = []
        for arg, value in zip(self.session.get_outputs(), self.session.run(None, feeds), strict=True):
            output = InferOutput(name=arg.name, shape=list(value.shape), datatype=TYPES[arg.type])
            output.set_data_from_numpy(value, binary_data=False)
            outputs.append(output)
        return InferResponse(model_name=self.name, infer_outputs=outputs, response_id=payload.id)


if __name__ == "__main__":
    name, path, http_port, grpc_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ModelServer(http_port=http_port, grpc_port=grpc_port, workers=1).start([OnnxDetector(name, path)])
