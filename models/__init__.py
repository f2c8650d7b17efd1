"""Model descriptions, pre-processing, decoders and the registry: pure functions of arrays, no engine."""
