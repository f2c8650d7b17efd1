"""Run in onnx2tf's own environment (`toolchains.py`: it pins TensorFlow, numpy 1.26 and onnx), never imported by
the service: an ONNX model converted to TFLite by onnx2tf, full-integer int8 (the Edge TPU compiler's input)
calibrated on the given frames, and float32 beside it (the reference the int8 file is judged against, on the same
engine). Only numpy and onnx2tf are imported here.

    python tflite_build.py --onnx F.onnx --calibration frames.npy --mean m0,m1,m2 --std s0,s1,s2 --output DIR

`frames.npy`: [n, H, W, 3] float32 pixels / 255 in the model's own colour order, as onnx2tf's `-cind` wants them;
mean and std in the same 0..1 units. Failures are one `error:` line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--calibration", type=Path, required=True)
    parser.add_argument("--mean", required=True)
    parser.add_argument("--std", required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    import onnx
    import onnx2tf

    # onnx2tf simplifies the model it is given in place (onnxsim, written back over the file): a copy of its own, or
    # the user's cached model no longer matches its checksum
    args.output.mkdir(parents=True, exist_ok=True)
    model = Path(shutil.copy(args.onnx, args.output / args.onnx.name))
    name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    shape = (1, 1, 1, 3)  # per channel, NHWC as onnx2tf's TensorFlow side has it
    mean = np.asarray(_floats(args.mean), np.float32).reshape(shape)
    std = np.asarray(_floats(args.std), np.float32).reshape(shape)
    _own_test_images(np.load(args.calibration), args.output)
    print("onnx2tf: converting and calibrating", file=sys.stderr, flush=True)
    try:
        onnx2tf.convert(
            input_onnx_file_path=str(model),
            output_folder_path=str(args.output),
            output_integer_quantized_tflite=True,
            custom_input_op_name_np_data_path=[[name, str(args.calibration), mean, std]],
            quant_type="per-channel",
            non_verbose=True,
        )
    except Exception as exc:  # noqa: BLE001 - onnx2tf's own exceptions are many: said in one line
        print(f"error: onnx2tf failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _own_test_images(frames: np.ndarray, folder: Path) -> None:
    """onnx2tf checks every conversion of an image model on 20 sample images it downloads from GitHub unless its
    file is in the working folder: the user's own frames, at the file's 128x128 and 0..1, so nothing is fetched."""
    import cv2

    picked = frames[np.linspace(0, len(frames) - 1, 20).round().astype(int)]
    small = np.stack([cv2.resize(frame, (128, 128), interpolation=cv2.INTER_AREA) for frame in picked])
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "calibration_image_sample_data_20x128x128x3_float32.npy", small.astype(np.float32))
    os.chdir(folder)


def _floats(text: str) -> list[float]:
    return [float(value) for value in text.split(",")]


if __name__ == "__main__":
    sys.exit(main())
