"""Stand-ins for vendor runtimes that need hardware absent here (HailoRT, RKNNLite), each copying a named vendor
version's behaviour from its source, and a recorder of what ONNX Runtime is asked for. Tests put this folder on
sys.path; nothing here ships with the package."""
